"""`ckl weights "text"`: the Train-Attention weight of every token, shaded in the terminal, as PNG or HTML.

Shading is relative to the text's largest weight (the weighted loss is normalised by the weights'
sum, so ratios are what matter); the numbers printed are phi's own.
"""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

from core.settings import Settings

Weighted = list[tuple[str, float]]

# 24-bit background from white (weight 0) to deep orange (weight 1).
_LOW, _HIGH = (255, 255, 255), (230, 85, 13)


def shade(weight: float) -> tuple[int, int, int]:
    w = min(max(weight, 0.0), 1.0)
    return tuple(round(lo + (hi - lo) * w) for lo, hi in zip(_LOW, _HIGH))  # type: ignore[return-value]


def relative(tokens: Weighted) -> Weighted:
    """Weights over the text's largest one: what the threshold and the normalised loss see."""
    top = max((w for _, w in tokens), default=0.0) or 1.0
    return [(text, w / top) for text, w in tokens]


def terminal(tokens: Weighted) -> str:
    parts = []
    for text, w in relative(tokens):
        r, g, b = shade(w)
        parts.append(f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m{text}\x1b[0m")
    return "".join(parts)


def html_page(tokens: Weighted, title: str = "Train-Attention weights") -> str:
    spans = "".join(f'<span title="{w:.3f}" style="background:rgb{shade(r)}">{html.escape(text)}</span>'
                    for (text, w), (_, r) in zip(tokens, relative(tokens)))
    return (f"<!doctype html><meta charset='utf-8'><title>{title}</title>"
            f"<body style='font:16px/1.8 sans-serif;max-width:60em;margin:2em auto;white-space:pre-wrap'>"
            f"<h3>{title}</h3><p>{spans}</p><p style='color:#666'>shaded relative to the largest weight; hover for the value</p>")


def pyplot():
    """matplotlib's pyplot on the Agg backend. matplotlib is in the `bench` extra, not a dependency of the service:
    only the PNG heatmap needs it, so it is imported here, when one is asked for."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("the PNG heatmap needs matplotlib: pip install 'ckl-serve[bench]'",
                                  name="matplotlib") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(tokens: Weighted, path: Path, per_line: int = 12) -> None:
    """Tokens as a grid of shaded cells, `per_line` to a row, each labelled with its text and weight."""
    plt = pyplot()
    rows = max(1, -(-len(tokens) // per_line))
    fig, ax = plt.subplots(figsize=(per_line * 1.1, rows * 0.55 + 0.4))
    for i, ((text, w), (_, r)) in enumerate(zip(tokens, relative(tokens))):
        x, y = i % per_line, rows - 1 - i // per_line
        ax.add_patch(plt.Rectangle((x, y), 1, 1, color=[c / 255 for c in shade(r)]))
        ax.text(x + 0.5, y + 0.62, text.replace("\n", "\\n")[:12], ha="center", va="center", fontsize=8)
        ax.text(x + 0.5, y + 0.22, f"{w:.2f}", ha="center", va="center", fontsize=6, color="#444")
    ax.set(xlim=(0, per_line), ylim=(0, rows), xticks=[], yticks=[])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def weigh_text(text: str, model, tokenizer, checkpoint: Path) -> Weighted:
    from workers.train_attention.phi import TrainAttention

    ids = tokenizer(text)["input_ids"]
    weights = TrainAttention.from_path(model, checkpoint).weights(ids)
    return [(tokenizer.decode([i]), w) for i, w in zip(ids, weights)]


def main(args: argparse.Namespace, settings: Settings) -> None:
    """`args` as parsed by `ckl weights`; `settings` as the command line built them (its flags included)."""
    from core.model.loader import load_model
    from workers.train_attention.phi import packaged_checkpoint

    text = Path(args.text[1:]).read_text() if args.text.startswith("@") else args.text
    if not text.strip():
        raise SystemExit("the text is empty")
    if args.png:  # before the model loads: say now that the image cannot be drawn
        try:
            pyplot()
        except ModuleNotFoundError as exc:
            raise SystemExit(f"ckl weights --png: {exc}") from exc
    loaded = load_model(settings, progress=lambda msg: print(msg, file=sys.stderr))
    checkpoint = args.checkpoint or settings.training.phi_checkpoint or packaged_checkpoint(settings.model)
    tokens = weigh_text(text, loaded.model, loaded.tokenizer, checkpoint)
    print(terminal(tokens))
    ranked = sorted(tokens[1:], key=lambda t: -t[1])[:10]
    print("most weighted: " + ", ".join(f"{t!r} {w:.2f}" for t, w in ranked))
    if args.html:
        args.html.write_text(html_page(tokens))
        print(f"written {args.html}")
    if args.png:
        png(tokens, args.png)
        print(f"written {args.png}")
