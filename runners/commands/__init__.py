"""The command line's torch commands and the ``collsched`` entry point.

- ``cli``: ``collsched``: the torch-free commands of ``sim.cli`` plus the ones below;
- ``bench``: a schedule against torch's native collective, nccl-tests style;
- ``calibrate``: ``calibrate``, ``validate`` and ``tune``: a machine model from measurements, and the policy from it;
- ``demo``: the whole chain on one schedule;
- ``launch``: process-group setup under torchrun or with local processes.
"""
