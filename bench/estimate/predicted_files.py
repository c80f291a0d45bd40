"""The committed PREDICTED files rewritten: the ranges' spreads from the current validation, each profile's
PREDICTED.md and predicted.csv with the validation line, and (for every profile) the shipped configs' shapes."""

from pathlib import Path


def write_predicted_files(hardware: str, results: Path) -> list[str]:
    """What was written, one entry a file (or the shapes' count). `hardware`: a profile, or `all`. Reads the runs
    git tracks only: a run made in this checkout and not added to git is not in them."""
    from bench.estimate.prediction_tables import predicted_profiles, write_predicted
    from bench.estimate.published import published_rows
    from bench.estimate.validate import validate, validation_line, write_current_spreads

    rows, _ = validate()
    published = published_rows()
    written = [str(write_current_spreads(rows, published))]
    line = validation_line(rows, published)
    for profile in predicted_profiles() if hardware == "all" else [hardware]:
        written += [str(path) for path in write_predicted(profile, results, line)]
    if hardware == "all":
        from bench.estimate.shipped_shapes import write_shipped

        written.append(f"{len(write_shipped())} shape entries of the shipped configs")
    return written
