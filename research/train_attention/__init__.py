"""Training Train-Attention's phi (`ckl train-attention`); the phi a worker runs is workers/train_attention/phi.py."""
