from kafka_fixtures import open_transactions, produce, read_committed


def test_kafka_fixture_round_trip(kafka_topic):
    topic = kafka_topic(3)
    produce(topic, [{"i": i} for i in range(1000)], partitioner=lambda i, v: i % 3)
    got = read_committed(topic)
    assert sorted(r["i"] for r in got) == list(range(1000))
    assert open_transactions("lgtest-nothing-") == []
