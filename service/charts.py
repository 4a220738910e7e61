"""The retention curves as a PNG for reports (GET /health/forgetting.png): per version, the NF suite's accuracy,
the learned suite's and the general prompts' drift, the lines the console draws. Pure: the report's rows in, the
PNG's bytes out."""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from PIL import Image, ImageDraw

SIZE = (720, 360)
MARGIN = (56, 24, 24, 48)  # left, top, right, bottom
SERIES = {"nf_acc": ("NF suite", (37, 99, 235)), "learned_acc": ("learned", (22, 163, 74)),
          "general_drift": ("general-prompt drift", (220, 38, 38))}


def forgetting_png(rows: Sequence[dict[str, Any]]) -> bytes:
    """Shares 0..1 up, the versions in order along; a version without a score leaves a gap in its line."""
    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN[0], MARGIN[1], SIZE[0] - MARGIN[2], SIZE[1] - MARGIN[3]
    draw.rectangle((left, top, right, bottom), outline=(160, 160, 160))
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = bottom - tick * (bottom - top)
        draw.line((left, y, right, y), fill=(230, 230, 230))
        draw.text((8, y - 6), f"{tick:.2f}", fill=(80, 80, 80))
    step = (right - left) / max(len(rows) - 1, 1)
    for i, row in enumerate(rows):
        x = left + i * step
        if len(rows) <= 24 or i % (len(rows) // 24 + 1) == 0:
            draw.text((x - 6, bottom + 6), f"v{row['version']}", fill=(80, 80, 80))
    for n, (field, (name, colour)) in enumerate(SERIES.items()):
        points = [(left + i * step, bottom - row[field] * (bottom - top)) if row.get(field) is not None else None
                  for i, row in enumerate(rows)]
        for a, b in zip(points, points[1:]):
            if a and b:
                draw.line((*a, *b), fill=colour, width=2)
        for point in filter(None, points):
            draw.ellipse((point[0] - 3, point[1] - 3, point[0] + 3, point[1] + 3), fill=colour)
        draw.text((left + 8 + 130 * n, SIZE[1] - 20), f"- {name}", fill=colour)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
