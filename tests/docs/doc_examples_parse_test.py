#!/usr/bin/env python3
"""doc_examples.py's reading of Markdown: blocks, languages, markers, and the
mistakes it must refuse (a marker without a block, a skip without a reason)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_examples  # noqa: E402


def parse_text(text):
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(text)
    try:
        return doc_examples.parse(f.name, "doc.md")
    finally:
        os.unlink(f.name)


class ParseTest(unittest.TestCase):
    def test_blocks_languages_and_markers(self):
        blocks = parse_text(
            "# Title\n\n```\ndiagram\n```\n\n```sh\nkerntune status\n```\n\n"
            "<!-- doc-test: skip (needs a GPU) -->\n```sh\nkerntune tune\n```\n"
            "<!-- doc-test: daemons -->\n\n```sh\nkerntuned\n```\n"
            "```python\nprint(1)\n```\n")
        self.assertEqual([b.lang for b in blocks], ["", "sh", "sh", "sh", "python"])
        self.assertEqual([b.index for b in blocks], [0, 0, 1, 2, 0])
        self.assertEqual(blocks[1].text, "kerntune status\n")
        self.assertEqual(blocks[1].line, 7)
        self.assertIsNone(blocks[1].marker)
        self.assertEqual((blocks[2].marker, blocks[2].reason), ("skip", "needs a GPU"))
        self.assertEqual(blocks[3].marker, "daemons")
        self.assertIsNone(blocks[4].marker)

    def test_mistakes_are_refused(self):
        for text, message in [
            ("<!-- doc-test: skip -->\n```sh\nx\n```\n", "needs a reason"),
            ("<!-- doc-test: skip () -->\n```sh\nx\n```\n", "needs a reason"),
            ("<!-- doc-test: maybe (x) -->\n```sh\nx\n```\n", "unknown doc-test marker"),
            ("<!-- doc-test: skip (x) -->\nsome text\n```sh\nx\n```\n",
             "not followed by a code block"),
            ("<!-- doc-test: skip (x) -->\n", "at the end of the file"),
            ("```sh\nx\n", "never ends"),
        ]:
            with self.assertRaises(ValueError) as context:
                parse_text(text)
            self.assertIn(message, str(context.exception), text)

    def test_cpp_names_are_identifiers(self):
        self.assertEqual(doc_examples.cpp_name("client/README.md", 0), "client_readme_md_0")
        self.assertEqual(doc_examples.cpp_name("README.md", 2), "readme_md_2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
