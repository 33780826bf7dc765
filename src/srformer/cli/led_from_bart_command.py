"""``srformer led-from-bart``: a BART checkpoint made into an LED
(:func:`srformer.models.led_from_bart.led_from_bart`)."""

from __future__ import annotations

from pathlib import Path

from srformer.models.factory import load_model, load_tokenizer
from srformer.models.led_from_bart import led_from_bart


def run(args) -> int:
    """Load ``--checkpoint``, write its LED and tokenizer to ``--output``; returns 0.

    Raises:
        ValueError: ``--output`` already holds a model (``config.json``), and the errors of
            :func:`~srformer.models.led_from_bart.led_from_bart` (not BART, a bad window, period or length).
        FileNotFoundError: a ``--checkpoint`` that is neither a local checkpoint nor a reachable hub id.
    """
    output = Path(args.output)
    if (output / "config.json").exists():
        raise ValueError(f"--output {output} already holds a model (config.json): choose an empty folder.")
    bart = load_model(args.checkpoint)
    led = led_from_bart(bart, max_positions=args.max_positions, attention_window=args.attention_window,
                        position_period=args.position_period)
    tokenizer = load_tokenizer(args.checkpoint)
    led.save_pretrained(output)
    tokenizer.save_pretrained(output)
    period = args.position_period or bart.config.max_position_embeddings
    print(f"LED with {args.checkpoint}'s weights: encoder positions for {args.max_positions} tokens (BART's first "
          f"{period} repeated), local attention windows of {args.attention_window} tokens; written to {output}")
    return 0
