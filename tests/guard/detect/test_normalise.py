from __future__ import annotations

from proxy.guard.detect.normalise import normalise


def test_ascii_text_is_read_as_it_is() -> None:
    n = normalise("plain ascii text")
    assert n.text == "plain ascii text"
    assert n.identity
    assert n.hidden == ()
    assert n.span(6, 11) == (6, 11)


def test_zero_width_characters_are_removed_reported_and_spans_map_back_across_them() -> None:
    text = "key AKIA\u200b\u200bABCD end"
    n = normalise(text)
    assert n.text == "key AKIAABCD end"
    assert n.hidden == ((8, 10),)
    start = n.text.index("AKIA")
    assert n.span(start, start + 8) == (4, 14)
    assert text[4:14] == "AKIA\u200b\u200bABCD"


def test_look_alike_letters_and_full_width_forms_fold_to_latin() -> None:
    n = normalise("\u0410KIA \uff47\uff48\uff50\uff3f")  # Cyrillic A, full-width ghp_
    assert n.text == "AKIA ghp_"
    assert n.span(0, 4) == (0, 4)
    assert n.hidden == ()


def test_tag_characters_become_the_ascii_they_smuggle_and_are_hidden_text() -> None:
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "ignore")
    n = normalise("ok." + smuggled)
    assert n.text == "ok.ignore"
    assert n.hidden == ((3, 3 + len(smuggled)),)


def test_joiners_and_marks_that_scripts_and_emoji_need_are_not_hidden_text() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    for text in (family, persian, "\u05e9\u05dc\u05d5\u05dd\u200f", scotland):
        assert normalise(text).hidden == (), text
    assert normalise("a\u200db").hidden == ((1, 2),)  # a joiner between Latin letters is hiding


def test_bidi_overrides_are_hidden_text() -> None:
    assert normalise("user\u202e granted").hidden == ((4, 5),)


def test_json_escapes_are_read_when_asked_and_map_back_to_the_escape() -> None:
    text = "k: \\u0041KIA"
    assert normalise(text).text == text
    n = normalise(text, json_escapes=True)
    assert n.text == "k: AKIA"
    assert n.span(3, 7) == (3, 12)


def test_an_escaped_surrogate_pair_is_one_character() -> None:
    n = normalise("\\ud83d\\ude00!", json_escapes=True)
    assert n.text == "\U0001f600!"
    assert n.span(1, 2) == (12, 13)
