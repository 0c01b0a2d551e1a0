"""Everything attnprof draws: terminal tables (rich), JSON, HTML. Nothing else prints results."""
