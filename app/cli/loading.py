"""Loading the model a command runs on: the one the settings name, with the command line's overrides."""

from __future__ import annotations

import argparse
from dataclasses import replace

from transformers.utils import logging as transformers_logging

from app.cli.collector import collecting_after
from app.cli.output import progress_printer
from core.models import LoadedModel, load_model
from core.models.options import source_from_spec
from core.paths import AppPaths
from core.settings import Settings, SettingsStore


def command_settings(paths: AppPaths) -> Settings:
    """The saved settings (a file that cannot be used is set aside, and its warning logged, by the store)."""
    return SettingsStore(paths.config_dir).load().settings


def load_named_model(args: argparse.Namespace, settings: Settings, paths: AppPaths) -> LoadedModel:
    """The model ``settings`` name (or ``--model``), loaded with ``--device``, ``--dtype``, ``--quantization``."""
    transformers_logging.disable_progress_bar()  # our own progress line says the same, once
    source = source_from_spec(args.model, paths) if args.model else settings.source
    options = replace(
        settings.load,
        **{k: v for k, v in (("device", args.device), ("dtype", args.dtype), ("quantization", args.quantization)) if v},
    )
    with collecting_after():  # the model stays loaded until the command ends
        return load_model(source, options, paths.ensure(), progress_printer(f"{source.display_name}: "))


def load_from_args(args: argparse.Namespace, paths: AppPaths) -> tuple[Settings, LoadedModel]:
    """The settings, and the model they name loaded as :func:`load_named_model` does."""
    settings = command_settings(paths)
    return settings, load_named_model(args, settings, paths)
