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
    "Y": "101101010010010", "W": "101101111111101", " ": "000000000000000",
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
