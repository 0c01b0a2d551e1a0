import sys

from attnprof.cli import main

sys.exit(main())
