"""Error propagation on two-turn dialogues counted by hand."""

from mtsql.core.measures.propagation import propagation


def item(interaction, turn, ex):
    return {"interaction_index": interaction, "turn_index": turn, "exec_match": ex}


def test_two_turn_dialogues():
    items = [
        item(0, 0, 1),
        item(0, 1, 1),  # right then right
        item(1, 0, 0),
        item(1, 1, 1),  # wrong then right
        item(2, 0, 0),
        item(2, 1, 0),  # wrong then wrong
        item(3, 0, 1),
        item(3, 1, 0),  # right then wrong
        item(4, 0, 1),
        item(4, 1, 1),
        item(5, 0, None),
        item(5, 1, 1),  # the first turn is unscorable: nothing to condition on
        item(6, 0, 0),
        item(6, 1, None),
    ]  # the second is: nothing to count
    table = propagation(items)
    assert table["after_right"] == {"correct": 2, "scored": 3}
    assert table["after_wrong"] == {"correct": 1, "scored": 2}
    assert table["by_turn"]["2"] == {
        "after_right": {"correct": 2, "scored": 3},
        "after_wrong": {"correct": 1, "scored": 2},
    }
    assert table["by_turn"]["3"]["after_right"]["scored"] == 0


def test_each_turn_looks_at_the_one_before_it():
    table = propagation([item(0, 2, 1), item(0, 0, 0), item(0, 1, 1)])  # order does not matter
    assert table["after_wrong"] == {"correct": 1, "scored": 1}  # turn 2 after turn 1
    assert table["after_right"] == {"correct": 1, "scored": 1}  # turn 3 after turn 2
    assert table["by_turn"]["3"]["after_right"] == {"correct": 1, "scored": 1}
