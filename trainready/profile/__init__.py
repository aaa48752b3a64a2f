"""Profiler traces: capture, load, analyse (and, beside these, the web explorer).

- capture.py   `trainready profile -- python train.py` and `profile_steps()` for step loops
- schema.py    the columnar `Trace`: its tables, tracks and KIND_* codes
- trace.py     Kineto / Chrome-trace JSON -> columnar `Trace` (streamed, bounded, exact ns)
- columns.py   the decoder trace.py streams batches through (msgspec structs -> numpy columns)
- cache.py     parsed columns kept on disk per trace (path, size, mtime), so a reopen skips JSON
- intervals.py interval unions and sweeps on int64 ns arrays
- analysis.py  temporal / kernel-type / idle-cause breakdowns, overlap, launches, steps
- deps.py      dependency edges (launch, stream, host, fwdbwd, event sync), critical path
- opflops.py   FLOPs per op from recorded shapes -> TFLOP/s and MFU
- memory.py    allocator timeline and peak; source.py: ops -> user file:line
- summary.py   every analysis of one rank as one dict (what `analyze` prints)
"""
