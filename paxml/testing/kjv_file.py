"""A small generated corpus in the KJV file's format (the `bible` program's), for the data tests.

`write_kjv(path, chapters)` writes chapters "Exodus 1", "Exodus 2", ... of random verses over a
15-word vocabulary, as the real file lays them out (a blank line, the title, a blank line, then
"  <n> <verse>" lines), and returns what a reader should find: [(title, text)], the text being
the chapter's verses joined by spaces. The same arguments always write the same file.
"""

import random

_WORDS = "and the lord said unto moses go forth into land which i give thee".split()


def write_kjv(
  path: str,
  chapters: int,
  *,
  seed: int = 0,
  words_per_verse: tuple[int, int] = (4, 12),
  verses_per_chapter: tuple[int, int] = (2, 5),
) -> list[tuple[str, str]]:
  """Writes `chapters` chapters to `path`; the ranges are inclusive. Returns [(title, text)]."""
  rng = random.Random(seed)
  chapter_texts = []
  with open(path, "w") as f:
    for c in range(1, chapters + 1):
      title = f"Exodus {c}"
      f.write(f"\n{title}\n\n")
      verses = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(*words_per_verse))).capitalize()
        + "."
        for _ in range(rng.randint(*verses_per_chapter))
      ]
      for v, text in enumerate(verses, 1):
        f.write(f"  {v} {text}\n")
      chapter_texts.append((title, " ".join(verses)))
  return chapter_texts
