"""Nexmark's events, as its generator makes them, re-implemented from its rules
(`../shared/nexmark/generator/`): one stream of people, auctions and bids, 1 : 3 : 46, as the
JSON rows of Nexmark's Kafka table (`event_type` 0, 1 or 2 and one nested row per kind, the
others NULL; timestamps as Flink's JSON writes TIMESTAMP(3)).

The rules kept: event `n` of a run is of the kind its place in each block of 50 gives; person
and auction ids count up from 1000 as their events come; an auction's seller is a "hot" one (the
latest person id rounded down to a hundred) 3 times in 4, else one of the last 1,000 people; a
bid's auction is a hot one (the latest auction rounded down to a hundred) 1 time in 2, else one
of the last 100 in flight, its bidder a hot one 3 times in 4 (and, as the generator does, the
first person id added twice); prices 10^(0..6) x 100, uniform in the exponent; categories 10 to
14; event times 1e6 / rate µs apart from the base time, in order; an `extra` string pads each
kind to its average size (200, 500, 100 bytes). The random numbers are Python's, seeded: the
events are not the Java generator's, their distributions are.

    python bench/nexmark_generator.py --events 1000000 --bootstrap localhost:9092 --topic nexmark
    python bench/nexmark_generator.py --events 1000000 --out nexmark.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
CATEGORIES = 5
CLOSING_MS = 3_600_000  # how far after the events the closing ones are (`closing`)
HOT_RATIO = 100  # hot sellers, auctions and bidders: ids rounded down to this
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah")
FIRST_NAMES += ("Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones")
LAST_NAMES += ("Noris",)
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS = 10_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class NexmarkConfig:
    """Nexmark's defaults (`NexmarkConfiguration`)."""

    rate: int = 10_000  # events per second of event time
    people: int = 1
    auctions: int = 3
    bids: int = 46
    person_bytes: int = 200
    auction_bytes: int = 500
    bid_bytes: int = 100
    # 1 in this many bids is not on a hot auction, nor by a hot bidder; 1 in this many
    # auctions not by a hot seller
    hot_auctions: int = 2
    hot_sellers: int = 4
    hot_bidders: int = 4
    in_flight_auctions: int = 100
    active_people: int = 1000

    @property
    def total(self) -> int:
        return self.people + self.auctions + self.bids


class NexmarkGenerator:
    """Event `n` of a run from `base_ms`, each as the row of Nexmark's Kafka table."""

    def __init__(self, config: NexmarkConfig, base_ms: int, seed: int = 1) -> None:
        self.config = config
        self.base_ms = base_ms
        self.random = random.Random(seed)
        self.extra = "".join(self.random.choices(string.ascii_lowercase, k=1 << 16))
        self.hot_urls = [self._url() for _ in HOT_CHANNELS]
        self.channels = [self._channel(i) for i in range(CHANNELS)]

    def _string(self, longest: int, special: str = " ") -> str:
        """3 to `longest` - 1 letters, 1 in 13 of them `special`, trimmed."""
        size = 3 + self.random.randrange(longest - 3)
        letters = (
            special
            if self.random.randrange(13) == 0
            else self.random.choice(string.ascii_lowercase)
            for _ in range(size)
        )
        return "".join(letters).strip()

    def _padding(self, size: int, average: int) -> str:
        """The `extra` that brings a row of `size` bytes to `average` on average (+-20 %)."""
        if size > average:
            return ""
        wanted = average - size
        delta = round(wanted * 0.2)
        length = wanted - delta + (self.random.randrange(2 * delta) if delta else 0)
        start = self.random.randrange(len(self.extra) - length)
        return self.extra[start : start + length]

    def _url(self) -> str:
        parts = "/".join(self._string(5, "_") for _ in range(3))
        return f"https://www.nexmark.com/{parts}/item.htm?query=1"

    def _channel(self, number: int) -> tuple[str, str]:
        url = self._url()
        if self.random.randrange(10) > 0:
            url += f"&channel_id={abs(_reversed_bits(number))}"
        return f"channel-{number}", url

    def _price(self) -> int:
        return round(10.0 ** (self.random.random() * 6.0) * 100.0)

    def last_person(self, event: int) -> int:
        """The base-0 id of the latest person at event `event`."""
        epoch, offset = divmod(event, self.config.total)
        return epoch * self.config.people + min(offset, self.config.people - 1)

    def last_auction(self, event: int) -> int:
        """The base-0 id of the latest auction at event `event`."""
        config = self.config
        epoch, offset = divmod(event, config.total)
        if offset < config.people:
            epoch, offset = epoch - 1, config.auctions - 1
        elif offset >= config.people + config.auctions:
            offset = config.auctions - 1
        else:
            offset -= config.people
        return epoch * config.auctions + offset

    def _some_person(self, event: int) -> int:
        """One of the last active people (base 0), a few ids ahead allowed, as the generator."""
        people = self.last_person(event) + 1
        active = min(people, self.config.active_people)
        return people - active + self.random.randrange(active + PERSON_ID_LEAD)

    def _some_auction(self, event: int) -> int:
        latest = self.last_auction(event)
        first = max(latest - self.config.in_flight_auctions, 0)
        return first + self.random.randrange(latest - first + 1 + AUCTION_ID_LEAD)

    def time_ms(self, event: int) -> int:
        return self.base_ms + event * 1000 // self.config.rate

    def event(self, n: int) -> dict:
        """The `n`-th event (from 0)."""
        config, at = self.config, _timestamp(self.time_ms(n))
        kind = n % config.total
        row: dict = {"event_type": 0, "person": None, "auction": None, "bid": None}
        if kind < config.people:
            row["person"] = self._person(n, at)
        elif kind < config.people + config.auctions:
            row["event_type"], row["auction"] = 1, self._auction(n, at)
        else:
            row["event_type"], row["bid"] = 2, self._bid(n, at)
        return row

    def events(self, count: int, first: int = 0) -> Iterator[dict]:
        return (self.event(n) for n in range(first, first + count))

    def closing(self, count: int) -> list[dict]:
        """What follows `count` events in a run over a topic that ends: a person and an auction
        an hour of event time later, that join nothing (person 0, seller -1), so that every
        window of the events fires there, as Flink's end of input fires them."""
        at = _timestamp(self.time_ms(count) + CLOSING_MS)
        person = {"id": 0, "name": "", "state": "", "city": "", "dateTime": at}
        auction = {"id": 0, "seller": -1, "category": 0, "dateTime": at, "expires": at}
        return [
            {"event_type": 0, "person": person, "auction": None, "bid": None},
            {"event_type": 1, "person": None, "auction": auction, "bid": None},
        ]

    def _person(self, n: int, at: str) -> dict:
        name = f"{self.random.choice(FIRST_NAMES)} {self.random.choice(LAST_NAMES)}"
        email = f"{self._string(7)}@{self._string(5)}.com"
        card = " ".join(f"{self.random.randrange(10_000):04d}" for _ in range(4))
        city, state = self.random.choice(US_CITIES), self.random.choice(US_STATES)
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        return {
            "id": self.last_person(n) + FIRST_PERSON_ID,
            "name": name,
            "emailAddress": email,
            "creditCard": card,
            "city": city,
            "state": state,
            "dateTime": at,
            "extra": self._padding(size, self.config.person_bytes),
        }

    def _auction(self, n: int, at: str) -> dict:
        config = self.config
        if self.random.randrange(config.hot_sellers) > 0:
            seller = self.last_person(n) // HOT_RATIO * HOT_RATIO
        else:
            seller = self._some_person(n)
        initial = self._price()
        # an auction lasts up to twice the event time the auctions in flight span
        events_ahead = config.in_flight_auctions * config.total // config.auctions
        horizon_ms = events_ahead * 1000 // config.rate
        expires = self.time_ms(n) + 1 + self.random.randrange(max(2 * horizon_ms, 1))
        item, description = self._string(20), self._string(100)
        return {
            "id": self.last_auction(n) + FIRST_AUCTION_ID,
            "itemName": item,
            "description": description,
            "initialBid": initial,
            "reserve": initial + self._price(),
            "dateTime": at,
            "expires": _timestamp(expires),
            "seller": seller + FIRST_PERSON_ID,
            "category": FIRST_CATEGORY_ID + self.random.randrange(CATEGORIES),
            "extra": self._padding(8 + len(item) + len(description) + 40, config.auction_bytes),
        }

    def _bid(self, n: int, at: str) -> dict:
        config = self.config
        if self.random.randrange(config.hot_auctions) > 0:
            auction = self.last_auction(n) // HOT_RATIO * HOT_RATIO
        else:
            auction = self._some_auction(n)
        if self.random.randrange(config.hot_bidders) > 0:
            bidder = self.last_person(n) // HOT_RATIO * HOT_RATIO + 1
        else:
            bidder = self._some_person(n)
        if self.random.randrange(2) > 0:
            hot = self.random.randrange(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[hot], self.hot_urls[hot]
        else:
            channel, url = self.channels[self.random.randrange(CHANNELS)]
        return {
            "auction": auction + FIRST_AUCTION_ID,
            # the generator adds the first person id twice to a bidder: kept, so that the
            # joins on the bidder (q23) match as often as the field's runs
            "bidder": bidder + 2 * FIRST_PERSON_ID,
            "price": self._price(),
            "channel": channel,
            "url": url,
            "dateTime": at,
            "extra": self._padding(32, config.bid_bytes),
        }


def _reversed_bits(number: int) -> int:
    """Java's `Integer.reverse`, as a signed 32-bit int."""
    reversed_bits = int(f"{number & 0xFFFFFFFF:032b}"[::-1], 2)
    return reversed_bits - (1 << 32) if reversed_bits >= 1 << 31 else reversed_bits


def _timestamp(ms: int) -> str:
    """Epoch ms as Flink's JSON writes a TIMESTAMP(3): `yyyy-MM-dd HH:mm:ss.SSS`."""
    moment = EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--rate", type=int, default=10_000, help="events per event-time second")
    parser.add_argument("--base-ms", type=int, help="the first event's time (default: now)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="a JSON-lines file")
    parser.add_argument("--bootstrap", help="a Kafka broker to produce to")
    parser.add_argument("--topic", default="nexmark")
    parser.add_argument("--close", action="store_true", help="the closing events last")
    args = parser.parse_args(argv)
    base = args.base_ms if args.base_ms is not None else int(datetime.now(UTC).timestamp() * 1000)
    generator = NexmarkGenerator(NexmarkConfig(rate=args.rate), base, args.seed)
    events = generator.events(args.events)
    if args.close:
        events = itertools.chain(events, generator.closing(args.events))
    rows = (json.dumps(row, separators=(",", ":")) for row in events)
    if args.bootstrap:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20})
        for line in rows:
            while True:
                try:
                    producer.produce(args.topic, line.encode())
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush()
        return 0
    with open(args.out, "w") if args.out else contextlib.nullcontext(sys.stdout) as out:
        for line in rows:
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
