"""The docs as a newcomer meets them: a README short enough to read (≤ 200 lines, every detail one link away), an
index naming every guide, and no relative link pointing at a file that is not there."""

import re

import pytest

from tests.conftest import REPO

README_MAX_LINES = 200
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "experiments").glob("*.md"))]


def test_readme_is_at_most_200_lines():
    n = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move details into a guide under docs/ and link to it"


def test_the_docs_index_names_every_guide():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+)", index))
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_at_files_that_exist(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path = target.split("#", 1)[0]
        if not path or re.match(r"[a-z]+:", path):  # an anchor in the page, or a URL
            continue
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)} links to missing files: {broken}"
