"""A requester's file, uploaded through the New task page and packed as `trolly-wallet data pack` packs it.

The upload is bounded, the file (`MAX_UPLOAD_BYTES`) and the whole form with it (`MAX_FORM_EXTRA_BYTES` more,
one file, a few short fields), counted as it streams in, so an oversized one is refused before it is all read
or kept; a zip is unpacked member by member with every name checked (no absolute path, no `..`, no link,
bounded count and unpacked size), so nothing lands outside its folder. The file is then read and packed by
the requester's own code (`compute.data.packing.pack_file` for the model the page chose, then `write_packed`),
and its refusals (no label column, a single label, too many features...) come back as `UploadRefused` with
what to fix; so are a file the system cannot read or write (a name too long, a disk full) and a zip entry that
does not unpack. A failed upload leaves nothing behind.

The packing code loads torch, so it is imported where a file is packed or a pack opened, not with the console.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import secrets
import shutil
import stat
import zipfile
import zlib
from typing import TYPE_CHECKING, Callable

from aiohttp import BodyPartReader, web

from trolly.compute.errors import ComputeError

if TYPE_CHECKING:
    from trolly.compute.data.packing import PackedDataset

MAX_UPLOAD_BYTES = 64 << 20
"""The largest file the page may upload (a CSV, a JSONL or a zip of images)."""
MAX_FORM_EXTRA_BYTES = 64 << 10
"""What the form may carry beside the file: its few short fields and the multipart framing."""
MAX_FIELD_BYTES = 256
"""The longest text field (a template's key, a column name or a few, on or off)."""
FIELDS = ("template", "label_column", "keep_columns", "private", "task")
MAX_UNZIPPED_BYTES = 256 << 20
MAX_ZIP_MEMBERS = 50_000
SUFFIXES = (".csv", ".jsonl", ".ndjson", ".zip")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_PACK_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class UploadRefused(Exception):
    """The upload is not a dataset this console can pack; the message says what to fix."""


async def receive(request: web.Request, uploads: pathlib.Path, packs: pathlib.Path,
                  model_of: Callable[[str], str]) -> PackedDataset:
    """Read the multipart form (`file`, optional `template`, `label_column`, `keep_columns` (comma-separated, as
    `data pack --keep-columns`), `task` (classification when not given, or regression), `private` on or off, on
    when not given, as `trolly-wallet data pack` packs privately unless told `--public`), pack the file for the
    model `model_of(template)` reads into a new folder under `packs`, and return it; the raw upload is deleted
    either way."""
    from trolly.compute.data.encryption import new_data_key
    from trolly.compute.data.packing import pack_file, write_packed

    folder = uploads / secrets.token_urlsafe(12)
    folder.mkdir(parents=True)
    try:
        try:
            fields, source = await _read_form(request, folder)
        except OSError as error:  # the upload cannot be kept here: the disk full
            raise UploadRefused(f"the upload could not be kept here: {error.strerror or error}") from None
        label_column = fields.get("label_column", "").strip() or None
        keep_columns = tuple(name.strip() for name in fields.get("keep_columns", "").split(",") if name.strip())
        private = fields.get("private", "on") not in ("off", "false", "0")  # private unless asked, as `data pack`
        key = new_data_key() if private else None

        def pack() -> PackedDataset:
            data = unzip(source, folder / "unpacked") if source.suffix.lower() == ".zip" else source
            blobs, labels, source_format = pack_file(data, model_of(fields.get("template", "")), label_column,
                                                     key=key, keep_columns=keep_columns,
                                                     task=fields.get("task", "").strip() or "classification")
            return write_packed(blobs, labels, source_format, packs / secrets.token_urlsafe(12), key)

        try:
            return await asyncio.to_thread(pack)  # unzipping, reading, packing and hashing off the event loop
        except ComputeError as error:
            raise UploadRefused(_plain(str(error), folder)) from None
        except OSError as error:  # a file the system cannot write or read: a name too long, the disk full
            raise UploadRefused(_plain(f"the upload could not be unpacked or packed here: "
                                       f"{error.strerror or error}", folder)) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def find_pack(packs: pathlib.Path, pack_id: str) -> PackedDataset:
    """A pack this console made, by the id the page was given (its folder's name)."""
    from trolly.compute.data.packing import open_packed

    if not _PACK_ID.match(pack_id or "") or not (packs / pack_id).is_dir():
        raise UploadRefused("that upload is not here any more: upload the file again")
    try:
        return open_packed(packs / pack_id)
    except ComputeError as error:
        raise UploadRefused(str(error)) from None


class _Budget:
    """The bytes a form may still send; every part's chunks are counted against it as they arrive."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.left = total

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise self.exceeded()

    def exceeded(self) -> UploadRefused:
        return UploadRefused(f"the upload is larger than the {self.total:,} bytes a form may be: keep a sample of "
                             f"your data")


async def _read_form(request: web.Request, folder: pathlib.Path) -> tuple[dict[str, str], pathlib.Path]:
    if not request.content_type.startswith("multipart/"):
        raise UploadRefused("send the file as a multipart form (the page's upload field)")
    budget = _Budget(MAX_UPLOAD_BYTES + MAX_FORM_EXTRA_BYTES)
    if request.content_length is not None and request.content_length > budget.total:
        raise budget.exceeded()  # before a byte is read: the form says it is too large
    reader = await request.multipart()
    fields: dict[str, str] = {}
    source = None
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise UploadRefused("nested multipart forms are not accepted")
        if part.name == "file" and source is None:
            source = await _save_file(part, folder, budget)
        elif part.name in FIELDS and part.name not in fields:
            fields[part.name] = await _read_field(part, budget)
        else:
            raise UploadRefused(f"the form has an unexpected or repeated part {str(part.name)[:40]!r}: send one file "
                                f"and the fields {', '.join(FIELDS)}")
    if source is None:
        raise UploadRefused("choose a file: a .csv with a header, a .jsonl of {\"text\", \"label\"} lines, or a .zip "
                            "with one folder of images per class")
    return fields, source


async def _read_field(part: BodyPartReader, budget: _Budget) -> str:
    value = b""
    while chunk := await part.read_chunk(MAX_FIELD_BYTES + 1):
        budget.spend(len(chunk))
        value += chunk
        if len(value) > MAX_FIELD_BYTES:
            raise UploadRefused(f"the form field {part.name!r} is longer than {MAX_FIELD_BYTES} bytes")
    return value.decode("utf-8", "replace")


async def _save_file(part: BodyPartReader, folder: pathlib.Path, budget: _Budget) -> pathlib.Path:
    name = _SAFE_NAME.sub("_", pathlib.PurePath(part.filename or "").name).strip("._")[-100:] or "upload"
    if not name.lower().endswith(SUFFIXES):
        raise UploadRefused(f"{name} is not a dataset this console packs: upload a .csv file with a header row, a "
                            f".jsonl file of {{\"text\", \"label\"}} lines, or a .zip with one folder of images per "
                            f"class")
    target = folder / name
    size = 0
    with open(target, "wb") as out:
        while chunk := await part.read_chunk(1 << 16):
            size += len(chunk)
            budget.spend(len(chunk))
            if size > MAX_UPLOAD_BYTES:
                raise UploadRefused(f"{name} is larger than the {MAX_UPLOAD_BYTES >> 20} MiB an upload may be: "
                                    f"keep a sample of your data")
            out.write(chunk)
    if size == 0:
        raise UploadRefused(f"{name} is empty")
    return target


def unzip(archive: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """Unpack `archive` into `target`, refusing any member that would land outside it, a link, and archives too
    large or with too many members; returns the folder holding the class folders (a single top folder in the
    archive is stepped into)."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            if len(members) > MAX_ZIP_MEMBERS:
                raise UploadRefused(f"the zip holds {len(members)} entries, more than {MAX_ZIP_MEMBERS}: keep a sample")
            if sum(member.file_size for member in members) > MAX_UNZIPPED_BYTES:
                raise UploadRefused(f"the zip unpacks to more than {MAX_UNZIPPED_BYTES >> 20} MiB: keep a sample")
            target.mkdir(parents=True)
            root = target.resolve()
            for member in members:
                _extract(bundle, member, root)
    except zipfile.BadZipFile:
        raise UploadRefused(f"{archive.name} is not a readable zip file") from None
    except (zlib.error, EOFError, NotImplementedError, RuntimeError) as error:  # corrupt, cut short, encrypted
        raise UploadRefused(f"{archive.name} does not unpack: {error}") from None
    entries = [entry for entry in target.iterdir() if not entry.name.startswith((".", "__MACOSX"))]
    if len(entries) == 1 and entries[0].is_dir() and all(child.is_dir() for child in entries[0].iterdir()):
        return entries[0]
    return target


def _extract(bundle: zipfile.ZipFile, member: zipfile.ZipInfo, root: pathlib.Path) -> None:
    name = member.filename
    mode = member.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise UploadRefused(f"the zip entry {name!r} is a link: zip the image files themselves")
    parts = pathlib.PurePosixPath(name.replace("\\", "/")).parts
    if not parts or name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise UploadRefused(f"the zip entry {name!r} points outside the archive's folder: zip the class folders "
                            f"themselves")
    destination = root.joinpath(*parts).resolve()
    if root not in destination.parents:
        raise UploadRefused(f"the zip entry {name!r} points outside the archive's folder")
    if member.is_dir():
        destination.mkdir(parents=True, exist_ok=True)
        return
    destination.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(member) as source, open(destination, "wb") as out:
        shutil.copyfileobj(source, out)


def _plain(message: str, folder: pathlib.Path) -> str:
    """The packer's message without the console's scratch paths (the file's own name is what the page shows)."""
    return message.replace(str(folder / "unpacked") + "/", "").replace(str(folder) + "/", "")
