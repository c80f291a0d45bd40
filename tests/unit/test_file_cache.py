"""A derived file is parsed once while it stays as it is, and again once it is rewritten."""

import os

from bench.file_cache import parsed


def test_a_file_is_parsed_again_only_once_it_changes(tmp_path):
    path, calls = tmp_path / "table.json", []

    def parse(text: str) -> str:
        calls.append(text)
        return text.upper()

    path.write_text("one", encoding="utf-8")
    assert [parsed(path, parse) for _ in range(3)] == ["ONE"] * 3
    assert calls == ["one"]
    path.write_text("two!", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # another modification time even where the clock's resolution is coarse
    assert parsed(path, parse) == "TWO!"
    assert calls == ["one", "two!"]
