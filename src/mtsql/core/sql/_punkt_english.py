"""The small part of NLTK's English Punkt model (``punkt_tab/english``) that sentence splitting of
SQL text can touch: abbreviations, collocations and frequent sentence starters.

Used only when the NLTK data package ``punkt_tab`` is not installed (the usual offline case). The
model's orthographic-context table (20k words) is left out: it decides only between "abbreviation
then capitalised word" cases such as ``Mr.  SELECT``, which real predictions do not contain.
"""

from __future__ import annotations

ABBREVIATIONS = frozenset(
    [". . "]
    + """a.a a.c a.d a.g a.h a.m a.m.e a.s a.t adm ala ariz aug ave b.f b.v bros c c.i.t c.o.m.b c.v calif
    chg cie co col colo conn corp cos ct d d.c d.h d.w dec dr e e.f e.h e.l e.m f f.g f.j feb fla fri ft
    g g.d g.f g.k ga gen h h.c h.f h.m i.m.s ill inc j.b j.c j.j j.k j.p j.r jan jr k kan ky l l.a l.f
    l.p lt ltd m m.b.a m.d.c m.j maj messrs mg mich minn mr mrs ms n n.c n.d n.h n.j n.m n.v n.y nev nov
    oct ok okla ore p p.a.m p.m pa ph.d prof r r.a r.h r.i r.j r.k r.t rep reps s s.a s.a.y s.c s.g
    s.p.a s.s sen sep sept sr st sw t t.j tenn tues u.k u.n u.s u.s.a u.s.s.r v va vs vt w w.c w.r w.va
    w.w wash wed wis yr""".split()
)

SENTENCE_STARTERS = frozenset(
    "according although among both but despite even he however i if in indeed instead it many meanwhile "
    "moreover most nevertheless nonetheless nor sales separately similarly since so some the there these "
    "they this though thus under when while yet".split()
)

_NUMBER_COLLOCATES = (
    "abreast aes business cbot colgate commodities cooper corrections credit dividend financing genentech "
    "henley insider international leisure letters notable pay-fone pegasus pepper review rj wedgestone who "
    "zimmer"
).split()

COLLOCATIONS = frozenset(
    [("##number##", word) for word in _NUMBER_COLLOCATES]
    + [
        ("b", "edelman"),
        ("b", "levine"),
        ("b", "smith"),
        ("b", "stewart"),
        ("b", "wigton"),
        ("i", "magnin"),
        ("i", "toussie"),
        ("j", "aron"),
        ("j", "fialka"),
        ("j", "walter"),
        ("o", "ludcke"),
    ]
)
