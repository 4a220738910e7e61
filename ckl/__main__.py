"""`python -m ckl`: the `ckl` command without its installed script."""
from ckl.cli import main

if __name__ == "__main__":
    main()
