"""A metadata filter as PubMed esearch terms (issue 45): the fields MEDLINE records give map onto PubMed's tags,
and/or/not onto AND/OR/NOT, a part without a mapping is left out only where that widens the search."""
from __future__ import annotations

from pathlib import Path

import pytest

from medretrieve.corpus.pubmed_terms import MEDLINE_FIELDS, esearch_filter, filtered_term
from medretrieve.corpus.sources import read_records
from medretrieve.filters import parse_filter

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"


@pytest.mark.parametrize("where, term", [
    ('year >= 2015 and publication_type in (Review, "Randomized Controlled Trial") and not retracted',
     '2015:3000[dp] AND ("Review"[pt] OR "Randomized Controlled Trial"[pt]) NOT retracted publication[pt]'),
    ("year > 2014.5 and year < 2020", "2015:3000[dp] AND 1000:2019[dp]"),
    ("year <= 2010 or year == 2019", "(1000:2010[dp] OR 2019[dp])"),
    ("year in (2019, 2021)", "(2019[dp] OR 2021[dp])"),
    ("publication_date >= 2019-06", "2019/06:3000[dp]"),
    ('mesh == Metformin or mesh_major == "Diabetes Mellitus, Type 2"',
     '("Metformin"[mh] OR "Diabetes Mellitus, Type 2"[majr])'),
    ("journal == 'Diabetes care' and language == eng", '"Diabetes care"[jour] AND "eng"[la]'),
    ("retracted", "retracted publication[pt]"),
    ("retracted == false", "all[sb] NOT retracted publication[pt]"),
    ("not retracted", "all[sb] NOT retracted publication[pt]"),
    ("publication_type != Editorial", 'all[sb] NOT "Editorial"[pt]'),
    ('not (publication_type == "Case Reports" or year < 2000)', 'all[sb] NOT ("Case Reports"[pt] OR 1000:1999[dp])'),
    ('mesh == "odd [x] \\"quoted\\""', '"odd x quoted"[mh]'),   # PubMed's syntax characters dropped
    # a part without a mapping: left out of an AND (wider), the whole OR / NOT left out (it would narrow)
    ("topic == cardio and year == 2019", "2019[dp]"),
    ("topic == cardio or year == 2019", None),
    ("not (topic == cardio and year < 2000)", None),
    ("not (publication_type != Editorial)", None),
    ("year == 2019.5", None),
])
def test_filters_become_esearch_terms(where, term):
    assert esearch_filter(parse_filter(where)) == term


def test_the_question_term_is_narrowed_by_the_filter():
    where = parse_filter("year >= 2015 and not retracted")
    assert filtered_term("aspirin OR platelet", where) == \
        "(aspirin OR platelet) AND 2015:3000[dp] NOT retracted publication[pt]"
    assert filtered_term("aspirin platelet", parse_filter("not retracted")) == \
        "(aspirin platelet) NOT retracted publication[pt]"
    assert filtered_term("aspirin platelet", parse_filter("topic == x")) == "aspirin platelet"
    assert filtered_term("aspirin platelet", None) == "aspirin platelet"


def test_the_medline_fields_are_what_medline_records_give():
    from medretrieve.corpus.metadata import infer_fields

    assert infer_fields(r.metadata for r in read_records(MEDLINE)) == MEDLINE_FIELDS
