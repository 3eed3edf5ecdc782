"""The training curves of a run as a small inline SVG: train loss and held-out log-loss per epoch (and held-out
accuracy on its own axis), for the run's Flyte Deck.

Hand-drawn SVG rather than a plotting library: the Deck stays one self-contained page with no script and no
network, and the same epochs give the same bytes (no times: the x axis is the epoch number).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ml8s.contract.epochs import EpochRecord

_W, _H, _PAD = 560, 240, 44
_SERIES = (  # (label, colour, field); losses share the left axis, accuracy has the right one (0..1)
    ("train loss", "#1f77b4", "train_loss"),
    ("held-out log-loss", "#d62728", "held_out_log_loss"),
    ("held-out accuracy", "#2ca02c", "held_out_accuracy"),
)


def curves_svg(records: Sequence[EpochRecord]) -> str:
    """An SVG of the per-epoch curves; "" when there are no epochs to draw."""
    if not records:
        return ""
    epochs = [r.epoch for r in records]
    losses = [v for r in records for v in (r.train_loss, r.held_out_log_loss) if v is not None]
    top = max(losses) * 1.05 if losses and max(losses) > 0 else 1.0
    first, last = min(epochs), max(epochs)

    def x(epoch: int) -> float:
        return _PAD + (epoch - first) / max(last - first, 1) * (_W - 2 * _PAD)

    def y(value: float, high: float) -> float:
        return _H - _PAD + -(min(max(value, 0.0), high) / high) * (_H - 2 * _PAD)

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{_W}' height='{_H}' font-size='11' font-family='sans-serif'>",
        f"<rect x='{_PAD}' y='{_PAD}' width='{_W - 2 * _PAD}' height='{_H - 2 * _PAD}' fill='none' stroke='#999'/>",
        f"<text x='{_PAD - 4}' y='{_PAD + 4}' text-anchor='end'>{top:.3g}</text>",
        f"<text x='{_PAD - 4}' y='{_H - _PAD}' text-anchor='end'>0</text>",
        f"<text x='{_W - _PAD + 4}' y='{_PAD + 4}'>1</text>",
        f"<text x='{_W - _PAD + 4}' y='{_H - _PAD}'>0</text>",
        f"<text x='{_PAD}' y='{_H - _PAD + 16}' text-anchor='middle'>{first}</text>",
        f"<text x='{_W - _PAD}' y='{_H - _PAD + 16}' text-anchor='middle'>{last}</text>",
        f"<text x='{_W / 2:.0f}' y='{_H - 8}' text-anchor='middle'>epoch</text>",
    ]
    for n, (label, colour, field) in enumerate(_SERIES):
        high = 1.0 if field == "held_out_accuracy" else top
        points = [(r.epoch, getattr(r, field)) for r in records if getattr(r, field) is not None]
        if not points:
            continue
        path = " ".join(f"{x(e):.1f},{y(v, high):.1f}" for e, v in points)
        parts.append(
            f"<polyline fill='none' stroke='{colour}' stroke-width='2' points='{path}'>"
            f"<title>{label}</title></polyline>"
        )
        # a dot per epoch: a one-epoch run's line has no length, and the dots mark where the epochs are
        parts += [f"<circle cx='{x(e):.1f}' cy='{y(v, high):.1f}' r='2.5' fill='{colour}'/>" for e, v in points]
        parts.append(
            f"<text x='{_PAD + 8 + n * 160}' y='{_PAD - 10}' fill='{colour}'>{html.escape(label)} "
            f"(last {points[-1][1]:.4f})</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
