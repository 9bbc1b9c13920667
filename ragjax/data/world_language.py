"""The synthetic world's language: relations with their sentence, question and query templates,
attribute vocabularies and filler sentences.

Kept small and templated on purpose: a 1-5M-parameter policy trained from scratch on a CPU
has to learn *when and what to search*, not English.  Each relation has three paraphrases of
every template; `WorldConfig.paraphrases` picks how many are used.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

OCCUPATIONS = ("painter", "farmer", "baker", "sailor", "doctor", "teacher", "singer", "poet",
               "builder", "weaver", "potter", "hunter", "miller", "tailor", "smith", "fisher")
PRODUCTS = ("apples", "salt", "glass", "wool", "cheese", "boats", "bells", "silk", "honey",
            "rope", "paper", "lamps", "bread", "tea", "carpets", "clocks")
ORG_KINDS = ("Company", "Guild", "Bank", "School", "Club", "Press")
WORK_KINDS = ("book", "song", "play", "film", "poem")
# With a shared name lexicon a town is "<word> <kind>", so its full name can be new in every
# world; no kind can be a generated name word (letters outside the syllable inventory).
PLACE_KINDS = ("Hill", "Ford", "Port", "Field", "Cross", "Bridge")
YEAR_RANGES = {"person": (1800, 1960), "place": (1100, 1700), "org": (1850, 1990),
               "work": (1880, 2000)}
ENTITY_TYPES = ("person", "place", "org", "work")


@dataclasses.dataclass(frozen=True)
class Relation:
  """A fact type.  `obj` is an entity type or 'attr'; `describe` (entity-valued only) names the
  object through the subject, which is how bridge questions are composed."""
  name: str
  subj: str
  obj: str
  state: tuple[str, ...]
  ask: tuple[str, ...]
  query: str
  describe: tuple[str, ...] = ()
  values: Optional[str] = None  # attribute vocabulary: 'occupation', 'product', 'year'


RELATIONS: dict[str, Relation] = {r.name: r for r in (
    Relation("occupation", "person", "attr",
             ("{s} was a {o}.", "{s} worked as a {o}.", "By trade {s} was a {o}."),
             ("What was the job of {s}?", "What did {s} do for a living?", "What work did {s} do?"),
             "{s} job", values="occupation"),
    Relation("birth_year", "person", "attr",
             ("{s} was born in the year {o}.", "{s} was born in {o}.", "The birth year of {s} is {o}."),
             ("In what year was {s} born?", "When was {s} born?", "What is the birth year of {s}?"),
             "when was {s} born", values="year"),
    Relation("born_in", "person", "place",
             ("{s} was born in the town of {o}.", "{s} came from {o}.", "The home town of {s} is {o}."),
             ("In which town was {s} born?", "Where was {s} born?", "What is the home town of {s}?"),
             "where was {s} born",
             ("the home town of {s}", "the town where {s} was born", "the birthplace of {s}")),
    Relation("works_for", "person", "org",
             ("{s} worked for {o}.", "{s} had a job at {o}.", "{s} was a member of {o}."),
             ("Which group did {s} work for?", "Where did {s} work?", "For which group did {s} work?"),
             "{s} worked for",
             ("the employer of {s}", "the group that {s} worked for", "the group of {s}")),
    Relation("place_year", "place", "attr",
             ("{s} was founded in {o}.", "The town of {s} was built in {o}.", "{s} was first settled in {o}."),
             ("In what year was {s} founded?", "When was {s} founded?", "When was {s} built?"),
             "when was {s} founded", values="year"),
    Relation("known_for", "place", "attr",
             ("{s} is known for its {o}.", "{s} is famous for {o}.", "People in {s} make {o}."),
             ("What is {s} known for?", "What is {s} famous for?", "What do people in {s} make?"),
             "{s} known for", values="product"),
    Relation("org_year", "org", "attr",
             ("{s} was founded in {o}.", "{s} opened in {o}.", "{s} was started in the year {o}."),
             ("In what year was {s} founded?", "When did {s} open?", "When was {s} started?"),
             "when was {s} founded", values="year"),
    Relation("based_in", "org", "place",
             ("{s} is based in {o}.", "{s} has its main hall in {o}.", "The home of {s} is the town of {o}."),
             ("Where is {s} based?", "In which town is {s} based?", "Which town is the home of {s}?"),
             "where is {s} based",
             ("the home of {s}", "the town where {s} is based", "the base of {s}")),
    Relation("founder", "org", "person",
             ("{s} was founded by {o}.", "{o} started {s}.", "The founder of {s} was {o}."),
             ("Who founded {s}?", "Who started {s}?", "Who was the founder of {s}?"),
             "who founded {s}",
             ("the founder of {s}", "the person who started {s}", "the one who founded {s}")),
    Relation("work_year", "work", "attr",
             ("{s} came out in {o}.", "{s} was made in {o}.", "{s} first appeared in {o}."),
             ("In what year did {s} come out?", "When was {s} made?", "When did {s} first appear?"),
             "when did {s} come out", values="year"),
    Relation("creator", "work", "person",
             ("{s} is a {kind} by {o}.", "{o} made the {kind} {s}.", "{s} was created by {o}."),
             ("Who made {s}?", "Who created {s}?", "Who is the maker of {s}?"),
             "who made {s}",
             ("the maker of {s}", "the person who created {s}", "the creator of {s}")),
    Relation("set_in", "work", "place",
             ("{s} is set in {o}.", "The story of {s} takes place in {o}.", "{s} tells of life in {o}."),
             ("Where is {s} set?", "In which town does {s} take place?", "What town is {s} set in?"),
             "where is {s} set",
             ("the town where {s} is set", "the setting of {s}", "the town {s} tells of")),
)}

RELATIONS_OF = {t: tuple(r for r in RELATIONS.values() if r.subj == t) for t in ENTITY_TYPES}

# Retry questions ask about a person who shares the full name with decoys; these relations
# differ between namesakes, so the decoys' passages answer the wrong thing.
RETRY_RELATIONS = ("born_in", "birth_year", "works_for")


@dataclasses.dataclass(frozen=True)
class Comparison:
  """A yes/no question over two entities of one type: same value, or earlier year."""
  name: str
  subj: str
  relation: str
  kind: str  # 'same' | 'before'
  ask: tuple[str, ...]


COMPARISONS = (
    Comparison("same_town", "person", "born_in", "same",
               ("Were {a} and {b} born in the same town?", "Do {a} and {b} come from the same town?",
                "Is the home town of {a} the same as that of {b}?")),
    Comparison("born_before", "person", "birth_year", "before",
               ("Was {a} born before {b}?", "Was {a} born earlier than {b}?",
                "Is {a} older than {b}?")),
    Comparison("same_employer", "person", "works_for", "same",
               ("Did {a} and {b} work for the same group?", "Were {a} and {b} in the same group?",
                "Did {a} work for the same group as {b}?")),
    Comparison("org_before", "org", "org_year", "before",
               ("Was {a} founded before {b}?", "Is {a} older than {b}?", "Did {a} open before {b}?")),
    Comparison("same_base", "org", "based_in", "same",
               ("Are {a} and {b} based in the same town?", "Do {a} and {b} have their home in the same town?",
                "Is {a} based in the same town as {b}?")),
    Comparison("work_before", "work", "work_year", "before",
               ("Did {a} come out before {b}?", "Was {a} made before {b}?", "Is {a} older than {b}?")),
)

# Sentences that fill a passage to length without stating a fact.
FILLERS = {
    "person": ("Many people knew {s}.", "{s} liked long walks by the river.",
               "{s} often told old stories.", "Friends said that {s} was kind and quiet.",
               "{s} kept a small garden.", "{s} wrote many letters."),
    "place": ("{s} is a small town with old streets.", "A river runs past {s}.",
              "{s} has a busy market.", "Visitors say that {s} is calm.",
              "The houses in {s} have red roofs.", "{s} has a tall bell tower."),
    "org": ("{s} is well known in the region.", "{s} has many members.",
            "People trust {s}.", "{s} holds a meeting every spring.",
            "{s} keeps careful records.", "The hall of {s} is large."),
    "work": ("Many people enjoy {s}.", "{s} is still popular.", "Critics liked {s}.",
             "{s} is often talked about.", "Children learn about {s}.", "{s} is short and simple."),
}

# A passage may mention another entity in passing: a distractor hit for that entity's name.
MENTIONS = {
    "person": ("{s} was a friend of {o}.", "person"),
    "place": ("{s} trades with {o}.", "place"),
    "org": ("{s} once worked with {o}.", "org"),
    "work": ("{s} is often compared with {o}.", "work"),
}
