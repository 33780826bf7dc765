"""``srformer copy-reach``: can a checkpoint go on copying a passage from anywhere in its input?"""

from __future__ import annotations

import bisect

from srformer.cli.arguments import loading_settings
from srformer.cli.data_source import load_data
from srformer.cli.output_files import check_output_file
from srformer.evaluation.copy_reach import copy_reach, reach_starts
from srformer.evaluation.copy_reach_report import reach_summary, reach_table, write_copy_reach
from srformer.evaluation.evaluate import load_summarizer
from srformer.models.chunked_encoding import model_encoder, plan_windows
from srformer.training.pipeline import read_run


def run(args) -> int:
    """Load the checkpoint and the documents, measure the copy reach at passage starts every ``--stride`` tokens,
    write ``--output`` (JSON) with its table (``.md``) and plot (``.png``) beside it, and print the table; returns 0.

    The documents are the first ``--documents`` of ``--data`` (the split as for ``evaluate``) that reach
    ``--max-source-length`` tokens, so every start is scored on the same documents.

    Raises:
        ValueError: a bad option (the message names it), no document of ``--max-source-length`` tokens, bad data,
            or a checkpoint that cannot be loaded (:func:`srformer.evaluation.evaluate.load_summarizer`).
        FileNotFoundError: a checkpoint that is not there.
    """
    output = check_output_file(args.output, "--output")
    given_stride = 1 if args.stride is None else args.stride  # None: the default, chosen below
    for option, value, least in (("--span", args.span, 2), ("--documents", args.documents, 1),
                                 ("--batch-size", args.batch_size, 1), ("--stride", given_stride, 1)):
        if value < least:
            raise ValueError(f"{option} must be at least {least}, got {value}.")
    if not 0 <= args.cue < args.span:
        raise ValueError(f"--cue must be in [0, --span), got {args.cue} with --span {args.span}.")
    model, tokenizer = load_summarizer(args.checkpoint, *loading_settings(args))
    run_info = read_run(args.checkpoint) or {}
    length = args.max_source_length or run_info.get("max_source_length", 512)
    if length < args.span:
        raise ValueError(f"--max-source-length ({length} tokens) must be at least --span ({args.span}).")
    prefix = run_info.get("source_prefix", "")
    sequences = []
    for pair in load_data(args, default_split="test"):
        ids = tokenizer(prefix + pair.document, truncation=True, max_length=length)["input_ids"]
        if len(ids) >= length:
            sequences.append(ids)
        if len(sequences) == args.documents:
            break
    if not sequences:
        raise ValueError(f"No document of --data has --max-source-length {length} tokens; lower it.")
    settings = getattr(model_encoder(model), "srformer_windows", None)
    windows = None if settings is None or length <= settings.window else plan_windows(
        length, settings.window, settings.overlap)
    stride = args.stride or (max(1, windows.window // 2) if windows else max(args.span, length // 8))
    rows = copy_reach(model, sequences, reach_starts(length, args.span, stride), span=args.span, cue=args.cue,
                      pad_id=tokenizer.pad_token_id, batch_size=args.batch_size)
    for row in rows:
        row["window"] = bisect.bisect_right(windows.keep_starts, row["start"]) - 1 if windows else None
    record = {
        "checkpoint": str(args.checkpoint), "max_source_length": length,
        "encoder_window": windows.window if windows else None,
        "window_overlap": settings.overlap if settings is not None and windows else None,
        "window_keep_starts": list(windows.keep_starts) if windows else None,
        "span": args.span, "cue": args.cue, "documents": len(sequences), "rows": rows,
        "summary": reach_summary(rows, windows.keep_ends[0] if windows else None),
    }
    write_copy_reach(output, record)
    print(reach_table(record), end="")
    return 0
