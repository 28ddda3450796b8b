"""Just enough raster graphics for the examples' pictures, with no plotting library: PNG encoding
(zlib), a 3x5 pixel font (digits and capitals), and overlaid histograms with axes and a legend."""

from __future__ import annotations

import struct
import zlib

import numpy as np

_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001001001", "8": "111101111101111",
    "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111",
    "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010",
    "P": "110101110100100", "R": "110101110101101", "S": "011100010001110",
    "T": "111010010010010", "U": "101101101101111", "V": "101101101101010",
    "Y": "101101010010010", "X": "101101010101101", "W": "101101111111101", " ": "000000000000000",
    ":": "000010000010000", "-": "000000111000000", ".": "000000000000010",
    "%": "101001010100101", "(": "010100100100010", ")": "010001001001010",
}


def write_png(path: str, rgb: np.ndarray) -> None:
  """A truecolour 8-bit PNG of an (h, w, 3) uint8 array."""
  h, w, _ = rgb.shape
  raw = b"".join(b"\x00" + rgb[r].tobytes() for r in range(h))  # filter type 0 per row

  def chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
  png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
         + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
  with open(path, "wb") as f:
    f.write(png)


def read_png(path: str) -> np.ndarray:
  """The (h, w, 3) uint8 pixels of a PNG written by write_png; ValueError if it is not one (bad
  signature or chunk CRC, not 8-bit truecolour, a row filter other than 0)."""
  data = open(path, "rb").read()
  if data[:8] != b"\x89PNG\r\n\x1a\n":
    raise ValueError(f"{path}: not a PNG")
  pos, chunks = 8, {}
  while pos < len(data):
    (n,) = struct.unpack(">I", data[pos:pos + 4])
    kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
    (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
      raise ValueError(f"{path}: bad CRC in chunk {kind!r}")
    chunks[kind] = chunks.get(kind, b"") + body
    pos += 12 + n
  w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
  raw = zlib.decompress(chunks[b"IDAT"])
  rows = [raw[r * (3 * w + 1):(r + 1) * (3 * w + 1)] for r in range(h)]
  if depth != 8 or color != 2 or any(r[0] != 0 for r in rows):
    raise ValueError(f"{path}: not an unfiltered 8-bit truecolour PNG")
  return np.frombuffer(b"".join(r[1:] for r in rows), np.uint8).reshape(h, w, 3)


def text(img: np.ndarray, x: int, y: int, s: str, color=(0, 0, 0), scale: int = 2,
         anchor: str = "left") -> None:
  """Draws `s` (digits, capitals, a few signs) with its top edge at row y."""
  width = (4 * len(s) - 1) * scale
  if anchor == "center":
    x -= width // 2
  elif anchor == "right":
    x -= width
  for k, ch in enumerate(s.upper()):
    bits = _GLYPHS.get(ch, _GLYPHS[" "])
    for i in range(5):
      for j in range(3):
        if bits[3 * i + j] == "1":
          r, c = y + i * scale, x + (4 * k + j) * scale
          img[max(r, 0):r + scale, max(c, 0):c + scale] = color


def _nice_step(span: float, ticks: int) -> float:
  raw = span / ticks
  mag = 10 ** np.floor(np.log10(raw))
  return float(min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag))


def histograms(series, bins, labels, colors, *, x_label: str, y_label: str = "COUNT",
               notes=(), size=(720, 400)) -> np.ndarray:
  """Overlaid step-free bar histograms of each data series over the same bins, with axes, tick
  labels and a legend; returns an (h, w, 3) uint8 image."""
  w, h = size
  img = np.full((h, w, 3), 255, np.uint8)
  left, right, top, bottom = 70, 20, 20, 60
  pw, ph = w - left - right, h - top - bottom
  counts = [np.histogram(s, bins=bins)[0] for s in series]
  ymax = max(1, max(int(c.max()) for c in counts))
  ystep = _nice_step(ymax, 5)
  ytop = ystep * np.ceil(ymax / ystep)
  x0, x1 = float(bins[0]), float(bins[-1])
  px = lambda v: left + int(round((v - x0) / (x1 - x0) * (pw - 1)))
  py = lambda v: top + ph - 1 - int(round(v / ytop * (ph - 1)))
  for v in np.arange(0, ytop + ystep / 2, ystep):  # grid and y ticks
    img[py(v), left:left + pw] = (225, 225, 225)
    text(img, left - 8, py(v) - 5, f"{v:g}", anchor="right")
  for c, color in zip(counts, colors):  # bars, translucent over each other
    for b, n in enumerate(c):
      if n == 0:
        continue
      a, z = px(bins[b]) + 1, max(px(bins[b + 1]), px(bins[b]) + 2)
      region = img[py(n):top + ph, a:z].astype(np.float64)
      img[py(n):top + ph, a:z] = np.round(0.45 * region + 0.55 * np.asarray(color)).astype(
          np.uint8)
  img[top:top + ph, left] = 0  # axes
  img[top + ph - 1, left:left + pw] = 0
  xstep = _nice_step(x1 - x0, 8)
  for v in np.arange(np.ceil(x0 / xstep) * xstep, x1 + xstep / 2, xstep):
    img[top + ph:top + ph + 5, px(v)] = 0
    text(img, px(v), top + ph + 9, f"{v:g}", anchor="center")
  text(img, left + pw // 2, h - 22, x_label, anchor="center")
  text(img, left + 8, top + 4, y_label)
  y = top + 8  # legend
  for label, color in zip(labels, colors):
    img[y:y + 12, left + pw - 190:left + pw - 172] = color
    text(img, left + pw - 164, y + 1, label)
    y += 20
  for note in notes:
    text(img, left + pw - 190, y + 1, note)
    y += 20
  return img


def _draw_points(img, xs, ys, color, radius=1):
  h, w, _ = img.shape
  for x, y in zip(xs, ys):
    img[max(y - radius, 0):min(y + radius + 1, h), max(x - radius, 0):min(x + radius + 1, w)] = color


def _draw_line(img, xs, ys, color, width=2):
  """A polyline through pixel coordinates (consecutive points joined by straight segments)."""
  for (xa, ya), (xb, yb) in zip(zip(xs[:-1], ys[:-1]), zip(xs[1:], ys[1:])):
    n = int(max(abs(xb - xa), abs(yb - ya))) + 1
    px = np.round(np.linspace(xa, xb, n)).astype(int)
    py = np.round(np.linspace(ya, yb, n)).astype(int)
    _draw_points(img, px, py, color, radius=width // 2)


def panels(rows, *, x_label: str, x_range=None, size=(760, 560), legend=(),
           legend_at=(0.03, 0.55)) -> np.ndarray:
  """Vertically stacked panels sharing the x axis; returns an (h, w, 3) uint8 image.

  rows: one dict per panel with `height` (relative), `y_label`, and any of `points` ((x, y, color)
  scatter series), `lines` ((x, y, color) polylines), `zero` (draw y = 0). legend: (label, color).
  """
  w, h = size
  img = np.full((h, w, 3), 255, np.uint8)
  left, right, top, bottom, gap = 90, 20, 20, 50, 14
  pw = w - left - right
  total = sum(r.get("height", 1) for r in rows)
  avail = h - top - bottom - gap * (len(rows) - 1)
  xs_all = np.concatenate([np.asarray(s[0]) for r in rows
                           for s in list(r.get("points", ())) + list(r.get("lines", ()))])
  x0, x1 = x_range if x_range is not None else (float(xs_all.min()), float(xs_all.max()))
  px = lambda v: left + np.round((np.asarray(v) - x0) / (x1 - x0) * (pw - 1)).astype(int)
  y_cursor = top
  for k, row in enumerate(rows):
    ph = int(avail * row.get("height", 1) / total)
    series = list(row.get("points", ())) + list(row.get("lines", ()))
    ys_all = np.concatenate([np.asarray(s[1]) for s in series])
    lo, hi = float(ys_all.min()), float(ys_all.max())
    pad = 0.06 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    py = lambda v, lo=lo, hi=hi, t=y_cursor, ph=ph: t + ph - 1 - np.round(
        (np.asarray(v) - lo) / (hi - lo) * (ph - 1)).astype(int)
    step = _nice_step(hi - lo, 4)
    for v in np.arange(np.ceil(lo / step) * step, hi, step):  # grid and y ticks
      img[int(py(v)), left:left + pw] = (228, 228, 228)
      text(img, left - 8, int(py(v)) - 5, f"{v:.6g}", anchor="right")
    if row.get("zero") and lo < 0 < hi:
      img[int(py(0.0)), left:left + pw] = (120, 120, 120)
    for x, y, color in row.get("points", ()):
      _draw_points(img, px(x), py(y), color)
    for x, y, color in row.get("lines", ()):
      _draw_line(img, px(x), py(y), color)
    img[y_cursor:y_cursor + ph, left] = 0  # axes
    img[y_cursor + ph - 1, left:left + pw] = 0
    text(img, left + 8, y_cursor + 4, row.get("y_label", ""))
    if k == len(rows) - 1:
      xstep = _nice_step(x1 - x0, 8)
      for v in np.arange(np.ceil(x0 / xstep) * xstep, x1 + xstep / 2, xstep):
        img[y_cursor + ph:y_cursor + ph + 5, int(px(v))] = 0
        text(img, int(px(v)), y_cursor + ph + 9, f"{v:.6g}", anchor="center")
    y_cursor += ph + gap
  text(img, left + pw // 2, h - 20, x_label, anchor="center")
  first = int(avail * rows[0].get("height", 1) / total)
  lx, y = left + int(legend_at[0] * pw), top + int(legend_at[1] * first)
  for label, color in legend:
    img[y:y + 12, lx:lx + 18] = color
    text(img, lx + 26, y + 1, label)
    y += 20
  return img
