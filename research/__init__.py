"""Research tooling no worker runs: training Train-Attention's phi (train_attention/), the LAMA-ckl data
(lama_ckl.py) and where results are written (provenance.py)."""
