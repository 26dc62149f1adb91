"""gpuwait's own evaluation set: node traces from a physical model of real training and
inference jobs, each GPU's expected verdict argued from how the hardware, CUDA, NCCL, PyTorch,
the kernel and cgroups behave (docs/evaluation.md).

The model and the scenarios are written apart from the exporter: nothing here imports
``gpuwait``'s analysis or its simulator, and the traces are written as JSON in the documented
trace format (docs/trace-format.md). Only the scorer (``evaluation.score``) and the tests run
the exporter, to replay the traces through its real analysis.
"""
