"""rouge_l: our ROUGE-L F1 equals the rouge-score package's on 200 answer/reference pairs."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlfactory_nb.rewards import rouge_l
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.rewards.text import _lcs_length, rouge_l_f1, rouge_tokens

_VOCABULARY = """
the a of to and in is was that for it with as on by at from this be are an or which his her their
river city government population century war king election company music album film species
university school water energy model answer result number year years people first second new
located known called built founded released played served became including however although
Paris London Einstein Amazon Nile Tokyo 1,234 42 3.5 19th 2008 café naïve co-operation U.S.
don't it's e-mail $20 50% km/h
"""
WORDS = _VOCABULARY.split()


def answer_pairs(count: int = 200, seed: int = 0) -> list[tuple[str, str]]:
    """(model answer, reference) pairs like a QA or summary task's: a reference of 3-120 words, and an
    answer that drops, swaps, repeats and replaces some of them, adds filler and changes case; a few
    unrelated or empty answers."""
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        reference = [rng.choice(WORDS) for _ in range(rng.choice([3, 8, 20, 40, 80, 120]))]
        answer = [word for word in reference if rng.random() > 0.2]
        for _ in range(rng.randint(0, len(answer) // 5 + 1)):
            answer.insert(rng.randint(0, len(answer)), rng.choice(WORDS))
        if len(answer) > 3 and rng.random() < 0.5:
            i = rng.randrange(len(answer) - 1)
            answer[i], answer[i + 1] = answer[i + 1], answer[i]
        if index % 25 == 0:
            answer = [rng.choice(WORDS) for _ in range(5)] if index % 50 else []
        text = " ".join(answer)
        text = text.upper() if rng.random() < 0.1 else text.capitalize()
        pairs.append((f"{text}.", " ".join(reference) + rng.choice([".", "!", "", " ..."])))
    return pairs


def test_rouge_l_equals_rouge_score_on_200_pairs():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    pairs = answer_pairs()
    ours = [rouge_l_f1(rouge_tokens(answer), rouge_tokens(reference)) for answer, reference in pairs]
    theirs = [scorer.score(reference, answer)["rougeL"].fmeasure for answer, reference in pairs]
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert len({round(score, 3) for score in ours}) > 50, "the pairs should spread over many scores"


@given(st.lists(st.sampled_from("abcd"), max_size=70), st.lists(st.sampled_from("abcde"), max_size=70))
def test_bit_parallel_lcs_equals_the_textbook_table(first, second):
    table = [[0] * (len(second) + 1) for _ in range(len(first) + 1)]
    for i, x in enumerate(first):
        for j, y in enumerate(second):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    assert _lcs_length(first, second) == table[-1][-1]


def test_rouge_l_reads_the_answer_not_the_reasoning_and_takes_the_best_gold():
    sample = make_sample(
        "<think>The reference says the Nile flows north.</think>The Nile flows north into the Mediterranean.",
        ground_truth=["It flows south", "The Nile flows north to the Mediterranean Sea"],
    )
    # answer: 7 words, best gold: 8, common subsequence "the nile flows north the mediterranean": 6
    assert rouge_l(sample) == pytest.approx(2 * 6 / (7 + 8))


def test_rouge_l_without_ground_truth_is_an_error():
    with pytest.raises(ValueError, match="no ground truth"):
        rouge_l(make_sample("<answer>anything</answer>"))
