"""Procedural task families, one module each; ``rewards.registry`` collects them.

family.py           Family: name, max_difficulty, generate(rng, difficulty), normalize(answer)
normalize.py        shared answer canonicalization (ints, whitespace, case)
arithmetic.py       'arithmetic': '12+7=' -> '19'
lists.py            'lists': 'sort 3 1 2' -> '1 2 3'
base_conversion.py  'base': '13 to base 2' -> '1101'
boolean.py          'boolean': 'not t or f' -> 'f'
counting.py         'counting': 'count a in abca' -> '2'
"""

from swarm_node.rewards.families.family import Family

__all__ = ["Family"]
