"""rewardlab.fields.attribute_docs: the string literal under each field of a dataclass, read from source."""

from __future__ import annotations

from dataclasses import dataclass, field

from rewardlab.algos import Algo
from rewardlab.fields import attribute_docs
from rewardlab.rollout.tool_settings import ToolSettings


@dataclass
class _Base:
    inherited: int = 0
    """A base's field: not in a subclass's own body."""


@dataclass
class _Sample(_Base):
    """The class docstring is not a field's."""

    plain: int = 1
    """  One line, stripped.  """
    undocumented: int = 2
    after_undocumented: str = field(default="x", metadata={"cli": False})
    ("""Two adjacent """
     """literals are one docstring.""")
    not_a_field = 3
    """A plain assignment (no annotation) has no field doc."""
    last: float = 0.5
    """The last field."""


def test_each_annotated_field_with_a_literal_under_it_gets_that_literal_stripped():
    assert attribute_docs(_Sample) == {
        "plain": "One line, stripped.",
        "after_undocumented": "Two adjacent literals are one docstring.",
        "last": "The last field.",
    }


def test_only_the_class_own_body_is_read():
    assert attribute_docs(_Base) == {"inherited": "A base's field: not in a subclass's own body."}
    assert "inherited" not in attribute_docs(_Sample)


def test_a_class_defined_inside_a_function_is_read_too():
    @dataclass
    class Local:
        depth: int = 2
        """Indented source is dedented before parsing."""

    assert attribute_docs(Local) == {"depth": "Indented source is dedented before parsing."}


def test_the_settings_classes_document_every_field():
    # every Algo and ToolSettings field has its --help line (an undocumented field would be an empty help)
    for cls in (Algo, ToolSettings):
        docs = attribute_docs(cls)
        assert set(docs) == set(cls.__dataclass_fields__), cls
        assert all(docs.values()), cls
