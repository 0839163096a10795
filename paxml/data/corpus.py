"""Reading a text corpus into documents, and splitting them into train and eval sets.

Formats:
  "kjv": the King James Bible as the `bible` program prints it (@corpus//:kjv): a line
    "Genesis 1" starts a chapter, verse lines are "  N text". One document per chapter, verse
    numbers dropped and verses joined with spaces (1,189 documents, ~4 MB).
  "paragraphs": plain text, documents separated by blank lines; lines inside one are joined.
  "lines": plain text, one document per non-empty line.
"""

from __future__ import annotations

import re
from typing import Iterator

FORMATS = ("kjv", "paragraphs", "lines")
_VERSE = re.compile(r"^\s+(\d+)\s+(.*)$")
_CHAPTER = re.compile(r"^(\S.*\S)\s+(\d+)$")


def read_documents(
  path: str, fmt: str, replace_invalid_utf8: bool = False
) -> list[tuple[str, str]]:
  """(title, text) of every document in the file, in file order.

  Text that is not valid UTF-8 is a ValueError naming the file and the byte offset, unless
  `replace_invalid_utf8` (then the bad bytes become U+FFFD).
  """
  if fmt not in FORMATS:
    raise ValueError(f"corpus format must be one of {FORMATS}, got {fmt!r}.")
  with open(path, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8", errors="replace" if replace_invalid_utf8 else "strict")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(
      f"{path}: not valid UTF-8 at byte offset {e.start} (line {line}: "
      f"{data[e.start : e.start + 4]!r}). Convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8), "
      "or pass --replace_invalid_utf8 to replace bad bytes with U+FFFD."
    ) from None
  lines = text.splitlines()
  if fmt == "kjv":
    return list(_kjv_chapters(lines, path))
  if fmt == "lines":
    return [(f"line {i + 1}", line.strip()) for i, line in enumerate(lines) if line.strip()]
  docs, current = [], []
  for line in lines + [""]:
    if line.strip():
      current.append(line.strip())
    elif current:
      docs.append((f"paragraph {len(docs) + 1}", " ".join(current)))
      current = []
  return docs


def _kjv_chapters(lines: list[str], path: str) -> Iterator[tuple[str, str]]:
  title, verses = None, []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    verse = _VERSE.match(line)
    if verse:
      if title is None:
        raise ValueError(f"{path}:{number}: a verse before any chapter heading: {line[:60]!r}")
      verses.append(verse.group(2).strip())
      continue
    chapter = _CHAPTER.match(line)
    if not chapter:
      raise ValueError(
        f"{path}:{number}: expected a chapter heading like 'Genesis 1' or a "
        f"verse like '  1 In the beginning...', got {line[:60]!r}"
      )
    if title is not None and verses:
      yield title, " ".join(verses)
    title, verses = line.strip(), []
  if title is not None and verses:
    yield title, " ".join(verses)


def split_train_eval(docs: list, eval_every: int) -> tuple[list, list]:
  """Documents eval_every // 2, then every `eval_every` later, are held out for eval.

  Spreading the held-out documents over the whole corpus keeps both sets the same mix of books
  (a tail split would evaluate only on Revelation).
  """
  if eval_every < 2:
    raise ValueError(
      f"eval_every must be >= 2 (one in eval_every documents is held out), got {eval_every}."
    )
  train = [d for i, d in enumerate(docs) if i % eval_every != eval_every // 2]
  evals = [d for i, d in enumerate(docs) if i % eval_every == eval_every // 2]
  return train, evals
