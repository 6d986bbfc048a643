"""The lexical ranking of tools: terms, field weights, prefixes, bounds, determinism."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.catalog.search import MAX_QUERY_CHARS, Hit, ToolIndex, terms


def tool(name: str, description: str = "", title: str | None = None, **arguments: str) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {arg: {"type": "string", "description": text} for arg, text in arguments.items()},
        },
    }
    if title is not None:
        definition["title"] = title
    return definition


CATALOG = [
    tool("github.create_issue", "Create a new issue in a GitHub repository.", owner="Repository owner"),
    tool("github.list_issues", "List issues in a GitHub repository.", state="open or closed"),
    tool("github.createPullRequest", "Open a pull request.", head="branch with the changes"),
    tool("fs.read_text_file", "Read a file as text.", path="path of the file"),
    tool("fs.write_file", "Create or overwrite a file.", path="path", content="what to write"),
    tool("fs.list_directory", "List the entries of a directory.", path="the directory"),
    tool("db.query", "Run a read-only SQL query.", sql="the SQL statement"),
    tool("slack.post-message", "Post a message to a channel.", channel_id="channel", text="message text"),
]


def names(hits: tuple[Hit, ...]) -> list[str]:
    return [hit.name for hit in hits]


def test_terms_split_separators_and_case_changes_fold_case_stem_and_drop_stop_words() -> None:
    assert terms("github.createPullRequest") == ["github", "creat", "pull", "request"]
    assert terms("create_issue") == terms("create-issue") == terms("Create issues") == ["creat", "issu"]
    assert terms("HTTPServer parseJSONBody v2") == ["http", "server", "pars", "json", "bodi", "v2"]
    assert terms("list all the directories") == ["list", "all", "directori"]
    assert terms("repositories repository") == ["repositori", "repositori"]  # Snowball, not suffix cuts
    assert terms("running created listing") == ["run", "creat", "list"]


def test_terms_are_unicode_aware_and_ignore_punctuation_and_metacharacters() -> None:
    assert terms("Größe ändern") == terms("GRÖSSE Ändern") == ["grösse", "ändern"]
    assert terms("日本語 ツール") == ["日本語", "ツール"]
    assert terms(".*+?^$()[]{}|\\") == []
    assert terms("") == []


def test_a_query_finds_the_tool_whose_name_and_description_say_it() -> None:
    index = ToolIndex.build(CATALOG)
    assert names(index.search("create a github issue", 3))[0] == "github.create_issue"
    assert names(index.search("open a pull request", 3))[0] == "github.createPullRequest"
    assert names(index.search("write a file", 3))[0] == "fs.write_file"
    assert names(index.search("run SQL", 3))[0] == "db.query"
    assert names(index.search("send a message to a channel", 3))[0] == "slack.post-message"


def test_argument_names_and_descriptions_count() -> None:
    index = ToolIndex.build(CATALOG)
    assert names(index.search("channel_id", 1)) == ["slack.post-message"]
    assert names(index.search("sql statement", 1)) == ["db.query"]


def test_a_name_outweighs_the_same_word_in_another_tool_s_description() -> None:
    catalog = [
        tool("a.helper", "Use this before you deploy anything."),
        tool("b.deploy", "Ship the build."),
    ]
    assert names(ToolIndex.build(catalog).search("deploy", 2)) == ["b.deploy", "a.helper"]


def test_a_title_counts_more_than_a_description() -> None:
    catalog = [tool("x.one", "Frobnicate widgets."), tool("x.two", "Other things.", title="Frobnicate")]
    assert names(ToolIndex.build(catalog).search("frobnicate", 2)) == ["x.two", "x.one"]


def test_a_query_term_matches_longer_catalog_terms_it_begins_and_shorter_ones_it_extends() -> None:
    catalog = [tool("gh.get_repository", "Get a repository."), tool("k8s.get_config", "Get the config.")]
    index = ToolIndex.build(catalog)
    assert names(index.search("repo", 2)) == ["gh.get_repository"]
    assert names(index.search("configuration", 2)) == ["k8s.get_config"]
    assert index.search("ab", 2) == ()  # too short to be a prefix


def test_nothing_shared_finds_nothing_and_the_limit_holds() -> None:
    index = ToolIndex.build(CATALOG)
    assert index.search("", 5) == ()
    assert index.search("the of and", 5) == ()
    assert index.search("zebra quantum", 5) == ()
    assert index.search("file", 0) == ()
    assert len(index.search("file directory issue message", 2)) == 2


def test_ties_keep_catalog_order_and_the_ranking_is_the_same_every_build() -> None:
    catalog = [tool(f"s.t{i}", "same words here") for i in range(5)]
    hits = ToolIndex.build(catalog).search("same words", 5)
    assert names(hits) == [f"s.t{i}" for i in range(5)]
    assert ToolIndex.build(CATALOG).search("file", 8) == ToolIndex.build(CATALOG).search("file", 8)


@pytest.mark.parametrize("query", ["(a+)+$", "[", "\\", "*" * 1000, "\x00\ud800", "🙂 " * 500])
def test_hostile_queries_are_only_words(query: str) -> None:
    assert ToolIndex.build(CATALOG).search(query, 5) == ()


def test_items_without_a_string_name_and_hostile_fields_are_indexed_safely() -> None:
    catalog: list[Any] = [
        {"name": 7},
        {"description": "no name"},
        {"name": "x.big", "description": "word " * 100_000, "inputSchema": {"properties": "nope"}},
        {"name": "x.args", "inputSchema": {"properties": {f"a{i}": {} for i in range(10_000)}}},
        {"name": "x.tail", "title": 5, "annotations": {"title": "Needle"}},
    ]
    index = ToolIndex.build(catalog)
    assert index.names == ("x.big", "x.args", "x.tail")
    assert names(index.search("needle", 3)) == ["x.tail"]
    assert names(index.search("a9999", 3)) == []  # past the arguments read per tool


def test_scores_are_positive_and_ordered() -> None:
    hits = ToolIndex.build(CATALOG).search("list issues in a repository", 4)
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)


def test_a_query_word_finds_a_tool_that_uses_another_word_of_its_group_at_lower_weight() -> None:
    catalog = [tool("fs.make_folder", "Make a folder."), tool("fs.list_directory", "List a directory.")]
    index = ToolIndex.build(catalog)
    assert names(index.search("create directory", 2)) == ["fs.make_folder", "fs.list_directory"]
    assert names(index.search("create a new folder", 2))[0] == "fs.make_folder"
    assert names(index.search("rename", 2)) == []
    assert names(ToolIndex.build([tool("fs.move_file", "Move a file.")]).search("rename", 1)) == [
        "fs.move_file"
    ]
    assert names(index.search("folder", 2, synonyms=False)) == ["fs.make_folder"]
    found = index.search("folder", 2)
    assert names(found) == ["fs.make_folder", "fs.list_directory"]
    assert found[0].score > found[1].score


# ---- fields, stuffing, Unicode, size ------------------------------------------------------------


def test_a_hit_says_which_fields_its_words_matched_in() -> None:
    index = ToolIndex.build(CATALOG, servers={"db.query": "postgres"})
    (hit,) = index.search("sql statement", 1)
    assert hit.fields == ("description", "arguments")
    (hit,) = index.search("postgres", 1)
    assert (hit.name, hit.fields) == ("db.query", ("server",))
    (hit,) = index.search("create an issue", 1)
    assert hit.fields == ("name", "description")


def test_keyword_stuffing_does_not_beat_the_tool_that_honestly_does_the_task() -> None:
    honest = tool("gh.create_issue", "Create a new issue in a repository.", title="Create issue")
    stuffers = [
        tool("x.stuffed", "create issue " * 500),  # one field, repeated: saturates, and is long
        tool(
            "x.everywhere", "create issue", title="create issue create issue", create="issue", issue="create"
        ),
        tool("x.create_issue_create_issue_create_issue", "create issue create issue"),
    ]
    for stuffer in stuffers:
        others = [t for t in CATALOG if t["name"] != "github.create_issue"]
        index = ToolIndex.build([*others, stuffer, honest])
        assert names(index.search("create an issue in my repository", 2))[0] == "gh.create_issue", stuffer


def test_repeating_a_word_saturates_its_score() -> None:
    once = ToolIndex.build([tool("a.x", "deploy"), tool("a.y", "other")]).search("deploy", 1)[0].score
    many = ToolIndex.build([tool("a.x", "deploy " * 1000), tool("a.y", "other")]).search("deploy", 1)[0].score
    assert many < (1.2 + 1) * once  # BM25's k1 = 1.2: a thousand repeats are worth at most 2.2 mentions


@pytest.mark.parametrize(
    "hidden",
    [
        "\uff43\uff52\uff45\uff41\uff54\uff45 \uff49\uff53\uff53\uff55\uff45",  # fullwidth: NFKC: ASCII
        "cre\u200bate iss\u200due",  # zero-width space and joiner inside the words
        "\u202ecreate\u202c \ufeffissue",  # bidi override, byte-order mark
        "cre\u00adate is\U000e0041sue",  # soft hyphen, a tag character
    ],
)
def test_unicode_tricks_neither_hide_words_from_the_index_nor_from_a_query(hidden: str) -> None:
    assert terms(hidden) == ["creat", "issu"]
    index = ToolIndex.build([tool("a.other", "list things"), tool("a.hidden", hidden)])
    assert names(index.search("create issue", 1)) == ["a.hidden"]
    assert names(ToolIndex.build(CATALOG).search(hidden, 1)) == ["github.create_issue"]


def test_a_ten_thousand_tool_catalog_and_a_100_kib_query_are_bounded() -> None:
    catalog = [tool(f"s{i % 50}.tool_{i}", f"does thing {i} with widgets and gadgets") for i in range(10_000)]
    index = ToolIndex.build(catalog)
    assert len(index) == 10_000
    query = "widgets " + "gadgets " * 13_000  # 100 KiB: only the first MAX_QUERY_CHARS are read
    assert len(query) > 100 * 1024 > MAX_QUERY_CHARS
    hits = index.search(query, 5)
    assert len(hits) == 5
    assert index.search("thing 9999", 1)[0].name == "s49.tool_9999"


def test_common_abbreviations_in_a_query_find_the_words_tools_spell_out() -> None:
    catalog = [
        tool("gh.merge_pull_request", "Merge a pull request."),
        tool("gh.create_issue", "Create a new issue."),
        tool("pg.query", "Run a read-only query against the database."),
    ]
    index = ToolIndex.build(catalog)
    assert names(index.search("land PR 9", 1)) == ["gh.merge_pull_request"]
    assert names(index.search("my open PRs", 1)) == ["gh.merge_pull_request"]  # a plural acronym
    assert names(index.search("count rows in the db", 1)) == ["pg.query"]
    assert terms("PRs URLs HTTPServer") == ["prs", "url", "http", "server"]


def test_words_too_long_to_be_english_are_neither_stemmed_nor_kept_in_the_stem_cache() -> None:
    from proxy.catalog import search

    before = search._snowball.cache_info().currsize
    hostile = [f"{'a' * 200}{i:x}".replace("0", "b") for i in range(100)]
    assert terms(" ".join(hostile)) == [word.casefold() for word in hostile]
    assert search._snowball.cache_info().currsize == before
