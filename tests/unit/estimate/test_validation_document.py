"""docs/estimator-validation.md is what `validate-estimate --write` writes today from the committed runs, byte for
byte: the validation tables are generated, never edited by hand (regenerate with `make predicted`)."""

from bench.estimate.validate import VALIDATION_DOC, validation_document


def test_committed_validation_document_is_what_the_code_writes():
    assert VALIDATION_DOC.read_text(encoding="utf-8") == validation_document(), (
        f"{VALIDATION_DOC} is stale: regenerate with `make predicted` (dpo-bench validate-estimate --write)"
    )
