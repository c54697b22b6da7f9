"""The GPU check's sections: random models of real shapes, step cost, exactness, real model, memory, syncs.

Everything here imports only torch, transformers (and safetensors through it) at import time, so
``python -m core.bench.gpu_check`` runs on a bare GPU machine from a source checkout.
"""
