"""Running one schedule on one torch.distributed group, with the semantics of torch's collective of its kind.

- ``runner``: ``run(schedule, tensor, output, op, group)``, the entry point;
- ``plan``: one rank's share of a schedule, compiled for execution;
- ``arguments``: the cross-rank argument check (once per signature, then in band);
- ``buffers``: the caller's tensors or padded copies as chunks, and the reduce ops;
- ``staging``: staging memory for received chunks, kept between runs;
- ``executors``: the Python executors (per-step groups, host dataflow);
- ``native``: the native executor (``runners/csrc``), built on first use;
- ``switching``: a schedule's switch operations lowered to point-to-point transfers.
- ``verified``: the verifier's verdict on each schedule before it runs, once per content.

Nothing here knows of the backend or the commands.
"""
