#!/usr/bin/env python3
"""Turns a terminal capture with colour escapes (`tmux capture-pane -e -p`) into an SVG image.

Usage: ansi2svg.py CAPTURE.txt OUT.svg [COLUMNS ROWS]
Only the standard library; understands the SGR codes tmux emits (16, 256 and 24-bit colours, bold,
dim, reverse).
"""
import html
import re
import sys

BASIC = ["#1e1e1e", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5"]
BRIGHT = ["#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]
DEFAULT_FG, DEFAULT_BG = "#d4d4d4", "#1e1e1e"
CELL_W, CELL_H = 8.4, 17


def color256(n):
    if n < 8:
        return BASIC[n]
    if n < 16:
        return BRIGHT[n - 8]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (steps[n // 36], steps[n // 6 % 6], steps[n % 6])
    level = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (level, level, level)


def apply(codes, style):
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            style.update(fg=None, bg=None, bold=False, dim=False, reverse=False)
        elif c == 1:
            style["bold"] = True
        elif c == 2:
            style["dim"] = True
        elif c == 22:
            style["bold"] = style["dim"] = False
        elif c == 7:
            style["reverse"] = True
        elif c == 27:
            style["reverse"] = False
        elif 30 <= c <= 37:
            style["fg"] = BASIC[c - 30]
        elif 90 <= c <= 97:
            style["fg"] = BRIGHT[c - 90]
        elif c == 39:
            style["fg"] = None
        elif 40 <= c <= 47:
            style["bg"] = BASIC[c - 40]
        elif 100 <= c <= 107:
            style["bg"] = BRIGHT[c - 100]
        elif c == 49:
            style["bg"] = None
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                style[key] = color256(codes[i + 2])
                i += 2
            elif codes[i + 1] == 2 and i + 4 < len(codes):
                style[key] = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                i += 4
        i += 1


def runs(line, style):
    """Splits a captured line into (text, style) runs, updating `style` across lines."""
    out = []
    pos = 0
    for match in re.finditer(r"\x1b\[([0-9;]*)m", line):
        if match.start() > pos:
            out.append((line[pos:match.start()], dict(style)))
        codes = [int(c) if c else 0 for c in match.group(1).split(";")]
        apply(codes, style)
        pos = match.end()
    if pos < len(line):
        out.append((line[pos:], dict(style)))
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    cols = int(sys.argv[3]) if len(sys.argv) > 3 else 120
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 36
    lines = open(src, encoding="utf-8", errors="replace").read().split("\n")[:rows]
    width, height = cols * CELL_W, rows * CELL_H
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
        f'font-size="14">',
        f'<rect width="100%" height="100%" fill="{DEFAULT_BG}"/>',
    ]
    style = dict(fg=None, bg=None, bold=False, dim=False, reverse=False)
    for y, line in enumerate(lines):
        x = 0
        for text, s in runs(line, style):
            fg, bg = s["fg"] or DEFAULT_FG, s["bg"]
            if s["reverse"]:
                fg, bg = (bg or DEFAULT_BG), (s["fg"] or DEFAULT_FG)
            if bg:
                parts.append(
                    f'<rect x="{x * CELL_W:.1f}" y="{y * CELL_H}" width="{len(text) * CELL_W:.1f}" '
                    f'height="{CELL_H}" fill="{bg}"/>'
                )
            if text.strip():
                weight = ' font-weight="bold"' if s["bold"] else ""
                opacity = ' opacity="0.6"' if s["dim"] else ""
                parts.append(
                    f'<text x="{x * CELL_W:.1f}" y="{y * CELL_H + 13}" fill="{fg}"{weight}{opacity} '
                    f'xml:space="preserve" textLength="{len(text) * CELL_W:.1f}">{html.escape(text)}</text>'
                )
            x += len(text)
    parts.append("</svg>")
    with open(dst, "w", encoding="utf-8") as out:
        out.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
