from bench.assets.method_data import FORMS, completions, unpaired

PAIRS = [
    {"prompt": "p1", "chosen": " good 1", "rejected": " bad 1"},
    {"prompt": "p2", "chosen": " good 2", "rejected": " bad 2"},
]


def test_sft_trains_on_each_prompt_and_its_chosen_answer():
    assert completions(PAIRS) == [{"prompt": "p1", "completion": " good 1"}, {"prompt": "p2", "completion": " good 2"}]


def test_kto_rows_interleave_desirable_and_undesirable_answers_of_the_same_pairs():
    rows = unpaired(PAIRS)
    assert [(r["prompt"], r["completion"], r["label"]) for r in rows] == [
        ("p1", " good 1", True),
        ("p1", " bad 1", False),
        ("p2", " good 2", True),
        ("p2", " bad 2", False),
    ]
    assert all(sum(r["label"] for r in rows[i : i + 2]) == 1 for i in range(0, len(rows), 2))


def test_every_form_a_method_names_is_built():
    from bench.matrix.methods import METHODS

    assert {s.data for s in METHODS.values()} - {"pairs"} == set(FORMS)
