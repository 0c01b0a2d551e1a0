"""Several ranks' traces analysed on a Dask distributed cluster (`attnprof analyze DIR --cluster ADDRESS`),
beside the local process pool of pipeline.ranks: the same job per trace, the same summaries, the same merge.

Each task reads one trace where it lies (a path every worker sees, or an fsspec URL) and returns that
rank's summary (a few kilobytes): only summaries travel, so the driver holds kilobytes per rank whatever
the traces' sizes. The scheduler places the tasks and re-runs a task whose worker died (up to its
`distributed.scheduler.allowed-failures`) or that raised (up to `RETRIES` times); each task logs its start
to the scheduler, so a rank started twice is named as re-run. A rank that cannot be read, or whose task
failed for good, is recorded with its reason and the others go on.

Dask is an optional extra (`pip install 'attnprof[cluster]'`), imported only here and only when a cluster
is asked for: `import attnprof` and the local path never import it. Workers started as
`dask worker ADDRESS --preload attnprof.pipeline.cluster` import attnprof's analysis once, when they start,
not in the first task of every job.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnprof.errors import UserError

if TYPE_CHECKING:  # the driver imports no analysis: the workers analyse and merge (pipeline.ranks)
    from attnprof.pipeline.one_trace import Progress

RETRIES = 2  # a task that raised is run again this many times before its rank counts as unread
EVENT_TOPIC = "attnprof-rank-started"
CONNECT_TIMEOUT_S = 30
CHUNKS_PER_THREAD = 4  # tasks per worker thread: enough for the scheduler to balance them
EXTRA = "pip install 'attnprof[cluster]'"


def _distributed() -> Any:
    """The `distributed` module, or a UserError saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise UserError(f"--cluster needs Dask distributed, which is not installed: {EXTRA}") from None
    return distributed


@contextmanager
def connect(address: str) -> Iterator[Any]:
    """A Dask client of `address`: `local` (a LocalCluster of one single-threaded worker process per core
    this process may use, on 127.0.0.1), a scheduler address (`tcp://host:port`) or a scheduler file.
    Closed (and the local cluster stopped) on leaving."""
    distributed = _distributed()
    if address == "local":
        from attnprof.pipeline.ranks import cores

        with distributed.LocalCluster(n_workers=cores(), threads_per_worker=1, processes=True, host="127.0.0.1",
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            yield client
        return
    where = {"address": address} if "://" in address else {"scheduler_file": address}
    if "scheduler_file" in where and not Path(address).is_file():
        raise UserError(f"--cluster {address}: neither `local`, a scheduler address (tcp://host:port) nor a "
                        "scheduler file")
    try:
        client = distributed.Client(**where, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise UserError(f"--cluster {address}: cannot reach the scheduler ({e})") from None
    with client:
        yield client


def analyze_ranks_on(client: Any, inputs: list[str | Path], region: str | None = None,
                     max_bytes: int | None = None, meanwhile: Callable[[], None] | None = None,
                     progress: Progress | None = None) -> dict:
    """pipeline.ranks.analyze_ranks on the cluster of `client`: the `attnprof.ranks/1` dict, and under
    "cluster" the scheduler, its workers and the ranks' traces that were re-run. The summaries are merged
    on a worker, where they already are: this process imports no analysis (~0.25 s before the first task
    could be sent, measured) and receives only the merged result."""
    from attnprof.pipeline.rank_paths import trace_paths

    paths = [str(p) for p in trace_paths(inputs)]
    run = uuid.uuid4().hex  # this run's tasks and events, apart from other clients' on the same scheduler
    parts, about = summaries_on(client, paths, region, max_bytes, run, meanwhile, progress)
    merged = client.submit(_merge_task, parts, len(paths), pure=False, key=f"attnprof-{run}-merge", retries=RETRIES)
    try:
        return {**merged.result(), "cluster": about}
    finally:
        merged.release()


def summaries_on(client: Any, paths: list[str], region: str | None, max_bytes: int | None, run: str,
                 meanwhile: Callable[[], None] | None = None,
                 progress: Progress | None = None) -> tuple[list[tuple[Any, list[int]]], dict]:
    """The summaries of `paths`, made by the cluster's workers and left there: (each task's future, or the
    summaries of ranks that failed for good, with the ranks it holds) for `_merge_task`; and what the run says
    about itself: the scheduler, its workers, the ranks' traces that were re-run. `run` names its tasks and
    events; `meanwhile` runs here once the tasks are sent."""
    distributed = _distributed()
    workers = client.nthreads()
    threads = max(sum(workers.values()), 1)
    sent = _submit(client, paths, _chunks(paths, threads * CHUNKS_PER_THREAD), region, max_bytes, run)
    if meanwhile is not None:
        meanwhile()
    parts: list[tuple[Any, list[int]]] = []
    done = 0
    pending = distributed.as_completed(list(sent))
    for future in pending:
        ranks = sent.pop(future)
        if future.status != "finished" and len(ranks) > 1:  # one task per rank: a bad rank takes no other along
            more = _submit(client, paths, [[i] for i in ranks], region, max_bytes, run)
            sent |= more
            pending.update(more)
            continue
        parts.append((future, ranks) if future.status == "finished" else ([_unread(future, paths[ranks[0]])], ranks))
        done += len(ranks)
        if progress is not None:
            progress("ranks", done, len(paths))
    starts = Counter(s for _, msg in client.get_events(EVENT_TOPIC) if msg.get("run") == run for s in msg["sources"])
    return parts, {"scheduler": client.scheduler.address, "workers": len(workers),
                   "rerun": sorted(source for source, n in starts.items() if n > 1)}


def _merge_task(parts: list[tuple[list[dict], list[int]]], n: int) -> dict:
    """On a worker: the summaries in the order of their ranks, merged as the local path merges them."""
    from attnprof.pipeline.ranks import merge

    found: list[dict] = [{}] * n
    for summaries, ranks in parts:
        for i, summary in zip(ranks, summaries, strict=True):
            found[i] = summary
    return merge(found)


def _chunks(paths: list[str], how_many: int) -> list[list[int]]:
    """The ranks dealt into `how_many` tasks, largest trace first, in turn: each task about as much
    reading (a task per rank cost the scheduler ~7 ms of CPU each here, a tiny trace's whole work)."""
    by_size = sorted(range(len(paths)), key=lambda i: -_size(paths[i]))
    how_many = min(how_many, len(paths))
    return [sorted(by_size[k::how_many]) for k in range(how_many)]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # a URL, or a trace its task reports as unread
        return 0


def _submit(client: Any, paths: list[str], chunks: list[list[int]], region: str | None, max_bytes: int | None,
            run: str) -> dict[Any, list[int]]:
    """A task per chunk of ranks (sent to the scheduler at once): its future, and the ranks it makes."""
    futures = client.map(_ranks_task, [[paths[i] for i in chunk] for chunk in chunks], region=region,
                         max_bytes=max_bytes, run=run, retries=RETRIES, pure=False,
                         key=[f"attnprof-{run}-{chunk[0]}-{len(chunk)}" for chunk in chunks])
    return dict(zip(futures, chunks, strict=True))


def _unread(future: Any, path: str) -> dict:
    """The rank recorded as unread, with why its task failed for good."""
    error = future.exception()
    reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return {"source": path, "error": f"{path}: not analysed on the cluster ({reason})"}


def _ranks_task(paths: list[str], region: str | None, max_bytes: int | None, run: str) -> list[dict]:
    """On a worker: tell the scheduler these ranks' task started (a second start is a re-run), then make
    their summaries as a worker of the local pool does."""
    from distributed import get_worker

    get_worker().log_event(EVENT_TOPIC, {"run": run, "sources": paths})
    from attnprof.pipeline.ranks import summary_job

    return [summary_job((path, region, max_bytes)) for path in paths]


# one profiler step of one rank: a kernel and an NCCL kernel beside it, each with its launch
_WARM_UP_TRACE = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
    *({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.0 + 3 * i, "dur": 2.0,
       "args": {"correlation": i}} for i in (1, 2)),
    {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": 10.0, "dur": 20.0,
     "args": {"correlation": 1, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "pid": 0, "tid": 20, "ts": 15.0,
     "dur": 30.0, "args": {"correlation": 2, "device": 0, "stream": 20}}]}


def dask_setup(worker: Any) -> None:
    """`dask worker --preload attnprof.pipeline.cluster`: import the analysis as the worker starts, and run it
    once on a one-step trace: a fresh process's first rank took ~45 ms against ~15 ms for the next ones (caches
    and NumPy's first calls, measured), which the first task of every worker would otherwise pay."""
    warm_up()


def warm_up() -> dict:
    """The analysis and the merge run once on `_WARM_UP_TRACE`, as two ranks: the merged result."""
    import json
    import tempfile

    from attnprof.pipeline.ranks import merge, summary_job

    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "warm_up.json"
        trace.write_text(json.dumps(_WARM_UP_TRACE))
        summary = summary_job((str(trace), None, None))
    return merge([summary, summary])
