"""Word count: text lines -> words -> per-word counts kept in keyed state.

Run it with any of::

    lockgate run examples/wordcount.py [TEXT_FILE ...] [--parallelism N] [--top N] [--out DIR]
    lockgate run --executor local examples/wordcount.py [...]    # no Spark, no Java
    python examples/wordcount.py [TEXT_FILE ...] [--parallelism N] [--top N] [--out DIR]

By default the job runs on Spark (an embedded ``local[*]`` session, which needs Java 17
or newer; ``lockgate run --master URL`` picks a cluster); ``--executor local`` (or
``LOCKGATE_EXECUTOR=local``) runs every subtask as a thread of this process instead.
``bash scripts/example.sh`` creates the virtual environment and runs this file.

Without a text file it counts a built-in text. The lines are read here, in the
driver, and become a ``CollectionSource``; the job splits them into words
(``flat_map``), partitions by word (``key_by``) and counts each word in a
``KeyedProcessFunction`` whose ``ValueState`` holds the word's running count.
Every count update goes to a ``FileSink`` (JSON lines, one part file per sink
subtask); after the job the script reads the part files back, keeps the last
count of each word and prints the most frequent words with the job's status
and per-operator record counts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import lockgate as lg

TEXT = """\
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them. To die: to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to, 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep: perchance to dream: ay, there's the rub;
"""

WORD = re.compile(r"[a-z']+")


def split_words(line: str) -> list[str]:
    """The lower-case words of a line ("'tis" and "wish'd" keep their apostrophe)."""
    return [w for w in (m.strip("'") for m in WORD.findall(line.lower())) if w]


class CountWords(lg.KeyedProcessFunction):
    """Counts the records of each key; emits ``{"word": key, "count": n}`` for every record."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: Any) -> Iterator[dict[str, Any]]:
        n = self.count.value() + 1
        self.count.update(n)
        yield {"word": ctx.current_key, "count": n}


def build(env: lg.StreamEnvironment, lines: list[str], out_dir: str) -> None:
    """lines -> words -> key_by(word) -> count -> JSON-lines files in ``out_dir``."""
    (
        env.from_source(lg.connectors.CollectionSource(lines), name="lines")
        .uid("lines")
        .flat_map(split_words, name="split words")
        .uid("split")
        .key_by(lambda word: word)
        .process(CountWords(), name="count words")
        .uid("count")
        .sink_to(lg.connectors.FileSink(out_dir, format="jsonl"), name="counts file")
        .uid("sink")
    )


def read_final_counts(paths: list[str]) -> dict[str, int]:
    """The highest (= last) count of each word in the JSON-lines files ``paths``."""
    final: dict[str, int] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                u = json.loads(line)
                final[u["word"]] = max(final.get(u["word"], 0), u["count"])
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Count the words of text files with lockgate.")
    parser.add_argument("files", nargs="*", help="text files to count (default: a built-in text)")
    parser.add_argument("--parallelism", type=int, default=2, help="subtasks per operator")
    parser.add_argument("--out", help="folder for the count updates (default: a temporary one)")
    parser.add_argument("--top", type=int, default=10, help="how many words to print")
    args = parser.parse_args(argv)

    lines: list[str] = []
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            lines.extend(f.read().splitlines())
    if not args.files:
        lines = TEXT.splitlines()

    with tempfile.TemporaryDirectory(prefix="lockgate-wordcount-") as tmp:
        out_dir = args.out or tmp
        before = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()

        env = lg.StreamEnvironment(parallelism=args.parallelism)
        build(env, lines, out_dir)
        result = env.execute("wordcount")

        # FileSink never overwrites: read only the part files this run wrote.
        written = sorted(os.path.join(out_dir, n) for n in set(os.listdir(out_dir)) - before)
        final = read_final_counts(written)

    print(f"job '{result.job_name}': {result.status.value} in {result.duration_ms:.0f} ms")
    for name, counts in result.record_counts.items():
        print(f"  {name:<14} in {counts['records_in']:>5}  out {counts['records_out']:>5}")
    ranked = sorted(final.items(), key=lambda kv: (-kv[1], kv[0]))
    print(
        f"{len(lines)} lines, {sum(final.values())} words, {len(final)} distinct; "
        f"top {min(args.top, len(ranked))}:"
    )
    for word, n in ranked[: args.top]:
        print(f"  {n:5d}  {word}")
    if args.out:
        print(f"count updates written to {', '.join(written)}")
    return 0 if result.status is lg.JobStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
