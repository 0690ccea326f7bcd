"""The New task page's upload bounded (issue 32 item 5), over HTTP: in total across a form's parts, an image's
pixels read from its header before it is decoded, a text's features counted in constant memory (the peak memory
of a real `trolly-console` process, read from /proc), and a malformed CSV, a decompression bomb and a file the
system cannot write refused with 400 and what to fix, never a 500. No node is needed: packing reads none."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import zipfile
import zlib

import aiohttp
import pytest
from aiohttp import FormData

from console_helpers import console_process, csrf_token, own_origin, with_console
from dev_node import free_port
from trolly.console import uploads
from trolly.console.security import CSRF_HEADER

NO_NODE = f"http://127.0.0.1:{free_port()}"
PEAK_GROWTH_BOUND = 80 << 20
"""How much an upload may raise the console's peak memory here: the refused images would cost 493 MB decoded, a
3 MB text's trigram list about 180 MB."""


def zip_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in entries.items():
            bundle.writestr(name, data)
    return buffer.getvalue()


def png(width: int, height: int) -> bytes:
    """A real grey PNG of `width` x `height` zeros (a 6000x6000 one is a few tens of KiB)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (width, height), 0).save(buffer, "PNG")
    return buffer.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG that is only a signature and a header claiming `width` x `height` grey pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IEND", b""))


def form(*parts: tuple[str, bytes, str | None]) -> FormData:
    data = FormData()
    for name, value, filename in parts:
        if filename:
            data.add_field(name, io.BytesIO(value), filename=filename, content_type="application/octet-stream")
        else:
            data.add_field(name, value.decode())
    return data


async def post_form(client, data: FormData, headers: dict | None = None, chunked: bool = False) -> tuple[int, dict]:
    """Post `data` as the page's upload; `chunked`: without a Content-Length, so only what streams in is counted."""
    guard = {"Origin": own_origin(client), CSRF_HEADER: await csrf_token(client)}
    body: object = data
    if chunked:
        payload, buffer = data(), io.BytesIO()

        class Collect:
            async def write(self, chunk: bytes) -> None:
                buffer.write(chunk)

        await payload.write(Collect())

        async def stream():
            yield buffer.getvalue()

        body, guard["Content-Type"] = stream(), payload.content_type
    response = await client.post("/api/new-task/upload", data=body, headers={**guard, **(headers or {})})
    return response.status, await response.json()


CSV = b"a,b,label\n" + b"".join(b"%d,%d,%s\n" % (i, i * 2, b"xy"[i % 2:i % 2 + 1]) for i in range(40))


def test_an_upload_is_bounded_in_total_across_its_parts(tmp_path, monkeypatch):
    """Attack: the 64 MiB bound was per part, so a form of several files, a huge field or parts of other names
    passed it (a field was read whole into memory). Now one file, short fields and the whole form are bounded."""
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 2000)
    monkeypatch.setattr(uploads, "MAX_FORM_EXTRA_BYTES", 1000)

    async def check(client):
        one = await post_form(client, form(("file", CSV, "a.csv")))
        two_files = await post_form(client, form(("file", CSV, "a.csv"), ("file", CSV, "b.csv")))
        long_field = await post_form(client, form(("file", CSV, "a.csv"), ("label_column", b"x" * 100_000, None)),
                                     chunked=True)
        other_part = await post_form(client, form(("file", CSV, "a.csv"), ("padding", b"x" * 100_000, None)),
                                     chunked=True)
        declared = await post_form(client, form(("file", CSV, "a.csv"), ("label_column", b"x" * 100_000, None)))
        return one, two_files, long_field, other_part, declared

    one, two_files, long_field, other_part, declared = with_console(NO_NODE, check, home=tmp_path / "home")
    assert one[0] == 200 and one[1]["train_samples"] + one[1]["test_samples"] == 40
    assert two_files[0] == 400 and "repeated part 'file'" in two_files[1]["error"]
    assert long_field[0] == 400 and "longer than" in long_field[1]["error"]
    assert other_part[0] == 400 and "unexpected" in other_part[1]["error"]
    assert declared[0] == 400 and "larger than" in declared[1]["error"]
    assert len(list((tmp_path / "home" / "console" / "packs").iterdir())) == 1  # only the first was packed
    assert not any((tmp_path / "home" / "console" / "uploads").iterdir())


def test_a_malformed_csv_a_decompression_bomb_and_an_unwritable_name_are_refused_with_400(tmp_path):
    """Attack: csv.Error, Pillow's DecompressionBombError and OS errors escaped as 500s. Now each is a refusal
    beside the file that says what is wrong, and nothing is left behind."""
    bomb = zip_of({"big/1.png": png_header(20_000, 20_000), "small/1.png": png(8, 8)})
    long_name = zip_of({f"{'n' * 300}/1.png": png(8, 8), "other/1.png": png(8, 8)})
    broken = zip_of({"a/1.png": png(8, 8)[:40], "b/1.png": png(8, 8)})  # cut short: fails only when decoded

    async def check(client):
        answers = []
        for name, data in (("huge-field.csv", b"a,label\n1," + b"x" * 200_000 + b"\n"), ("bomb.zip", bomb),
                           ("long.zip", long_name), ("broken.zip", broken)):
            answers.append(await post_form(client, form(("file", data, name))))
        return answers

    csv_error, bomb_error, name_error, broken_error = with_console(NO_NODE, check, home=tmp_path / "home")
    assert csv_error[0] == 400 and "is not valid CSV" in csv_error[1]["error"], csv_error
    assert bomb_error[0] == 400 and "too many pixels" in bomb_error[1]["error"], bomb_error
    assert name_error[0] == 400 and "could not be unpacked" in name_error[1]["error"], name_error
    assert broken_error[0] == 400 and "not a readable image" in broken_error[1]["error"], broken_error
    assert all(answer[1]["field"] == "file" for answer in (csv_error, bomb_error, name_error, broken_error))
    assert not any((tmp_path / "home" / "console" / "uploads").iterdir())


def peak_memory(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def upload_to(address: str, name: str, data: bytes) -> tuple[int, dict]:
    """Open the console at its printed address (a session, as a browser gets), then upload `data`."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        await browser.get(address)
        origin = address.split("?")[0].rstrip("/")
        token = (await (await browser.get(f"{origin}/api/session")).json())["csrf_token"]
        response = await browser.post(f"{origin}/api/new-task/upload", data=form(("file", data, name)),
                                      headers={"Origin": origin, CSRF_HEADER: token})
        return response.status, await response.json()


@pytest.mark.timeout(180)
def test_huge_images_are_refused_from_their_header_and_a_long_text_is_read_in_little_memory(tmp_path):
    """Attack: two 6000x6000 PNGs of a few tens of KiB were decoded to float32 before any size check (493 MB),
    and a JSONL text's trigrams were listed (about 80 times its size). Now the images are refused from their
    headers, and a text's features are counted as they are found: the console's peak memory hardly moves."""
    images = zip_of({"dark/1.png": png(6000, 6000), "light/1.png": png(6000, 6000)})
    text = "".join(chr(97 + (i * 7919) % 26) for i in range(3_000_000))
    lines = [json.dumps({"text": text, "label": "long"}), json.dumps({"text": "short", "label": "short"})]
    texts = "\n".join(lines * 2).encode()
    with console_process(NO_NODE, tmp_path / "console.log", 60.0, tmp_path / "home") as site:
        asyncio.run(upload_to(site.address, "warm.csv", CSV))  # the packing code imported and run once
        before = peak_memory(site.pid)
        packed = asyncio.run(upload_to(site.address, "texts.jsonl", texts))
        after_texts = peak_memory(site.pid)
        refused = asyncio.run(upload_to(site.address, "images.zip", images))
        after_images = peak_memory(site.pid)
    assert len(images) < 1 << 20 and len(texts) > 5 << 20
    assert after_texts - before < PEAK_GROWTH_BOUND, (before, after_texts)
    assert after_images - after_texts < PEAK_GROWTH_BOUND, (after_texts, after_images)
    assert refused[0] == 400 and "6000x6000" in refused[1]["error"] and "make the images smaller" in refused[1]["error"]
    assert packed[0] == 200 and packed[1]["format"] == "jsonl", packed
