"""The embedded demo corpus: short children's stories composed from hand-written parts, seeded.

`python -m npuport.train.stories` rewrites `npuport/train/stories.txt` (the shipped file, ~45 KB); the file, not
this generator, is what `--demo-corpus` reads, so a change here shows up in review as a data diff.
Stories are separated by `<|endoftext|>` lines, the TinyStories convention.
"""

from __future__ import annotations

import random
from pathlib import Path

HEROES = [
    ("Mia", "she", "her"), ("Tom", "he", "his"), ("Lily", "she", "her"), ("Ben", "he", "his"),
    ("Sara", "she", "her"), ("Max", "he", "his"), ("Anna", "she", "her"), ("Leo", "he", "his"),
    ("Zoe", "she", "her"), ("Sam", "he", "his"), ("Ella", "she", "her"), ("Jack", "he", "his"),
    ("a little bunny named Pip", "he", "his"), ("a small cat named Luna", "she", "her"),
    ("a brave mouse named Dot", "she", "her"), ("a happy dog named Rex", "he", "his"),
    ("a tiny bird named Kiki", "she", "her"), ("a young fox named Rusty", "he", "his"),
]
FRIENDS = ["a kind old owl", "a big brown bear", "a funny frog", "a shy turtle", "a friendly duck",
           "a tall giraffe", "a little girl from next door", "a boy with a red hat", "a busy squirrel"]
PLACES = ["the park", "the forest", "the garden", "the beach", "the farm", "the town", "the hill",
          "the river", "the school yard", "the big field"]
THINGS = [("ball", "red"), ("kite", "blue"), ("box", "shiny"), ("hat", "green"), ("shell", "pink"),
          ("stone", "smooth"), ("toy car", "yellow"), ("book", "old"), ("flower", "bright"), ("cup", "tiny")]
WEATHER = ["The sun was warm and bright.", "The sky was grey and it began to rain.",
           "A cold wind blew through the trees.", "It was a quiet morning with soft clouds.",
           "Snow covered the ground like a white blanket."]
FEELINGS = ["happy", "sad", "scared", "curious", "proud", "tired", "excited", "worried"]
OPENINGS = ["Once upon a time, there was {hero}.", "One day, {hero} went to {place}.",
            "There once lived {hero} who loved to play.", "Long ago, in a small house near {place}, lived {hero}."]
ENDINGS = ["From that day on, they were best friends.", "{Pro} smiled and went home, happy and tired.",
           "And they all played together until the sun went down.",
           "{Pro} learned that it is good to share and to help.", "It was the best day ever."]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _lost_thing(r: random.Random, h, pro, pos, place, friend) -> list[str]:
    thing, color = r.choice(THINGS)
    return [f"{_cap(pro)} had a {color} {thing} that {pro} loved very much.",
            f"One day, {pro} lost the {thing} in {place}.",
            f"{_cap(pro)} looked under the trees and behind the rocks, but the {thing} was gone.",
            f"{_cap(pro)} felt {r.choice(['sad', 'worried'])} and began to cry.",
            f"Then {friend} came by and asked, \"Why are you crying?\"",
            f"\"I lost my {color} {thing},\" said {h}.",
            f"\"I will help you look,\" said {friend.split(' ', 1)[1]}.",
            f"Together they searched, and soon they found the {thing} near a {r.choice(['bush', 'pond', 'fence'])}."]


def _share(r: random.Random, h, pro, pos, place, friend) -> list[str]:
    food = r.choice(["apples", "cookies", "berries", "carrots", "cakes"])
    return [f"{_cap(pro)} had a basket full of {food}.",
            f"At {place}, {pro} met {friend} who looked very hungry.",
            f"{_cap(pro)} did not want to share at first, because the {food} were {pos} favorite.",
            f"But then {pro} saw how {r.choice(FEELINGS[1:4])} {friend.split(' ', 1)[1]} was.",
            f"\"Would you like some {food}?\" asked {h}.",
            f"The {friend.split(' ')[-1]} said, \"Yes, please! Thank you!\"",
            f"They ate the {food} together and laughed.",
            f"Sharing made {h} feel warm inside."]


def _weather(r: random.Random, h, pro, pos, place, friend) -> list[str]:
    return [r.choice(WEATHER),
            f"{_cap(pro)} wanted to go to {place}, but {pos} mom said, \"Be careful and stay close.\"",
            f"At {place}, {pro} saw {friend} stuck in the mud.",
            f"{_cap(pro)} was {r.choice(['scared', 'worried'])}, but {pro} wanted to help.",
            f"{_cap(pro)} found a long stick and held it out.",
            f"The {friend.split(' ')[-1]} held on, and {pro} pulled and pulled.",
            f"At last the {friend.split(' ')[-1]} was free!",
            f"\"You are very brave,\" said the {friend.split(' ')[-1]}, and {h} felt {r.choice(['proud', 'happy'])}."]


def _learn(r: random.Random, h, pro, pos, place, friend) -> list[str]:
    skill = r.choice(["ride a bike", "swim", "climb a tree", "build a sand castle", "jump very high", "sing a song"])
    return [f"{_cap(pro)} wanted to {skill} more than anything.",
            f"{_cap(pro)} tried once, but {pro} fell down.",
            f"{_cap(pro)} tried again, and {pro} fell down again.",
            f"{_cap(friend)} watched and said, \"Do not give up. Try one more time, slowly.\"",
            f"So {h} took a deep breath and tried again.",
            f"This time, {pro} did it! {_cap(pro)} could {skill}!",
            f"{_cap(pro)} was so {r.choice(['happy', 'proud', 'excited'])} that {pro} did it ten more times."]


def _surprise(r: random.Random, h, pro, pos, place, friend) -> list[str]:
    thing, color = r.choice(THINGS)
    return [f"It was {pos} birthday, but nobody said a word.",
            f"{_cap(pro)} walked to {place} and felt a little {r.choice(['sad', 'lonely'])}.",
            f"Then {pro} heard a noise behind a tree.",
            f"\"Surprise!\" shouted {friend} and all {pos} friends.",
            f"They gave {h} a {color} {thing} with a big bow.",
            f"{_cap(pro)} clapped and jumped and said, \"This is the best gift!\"",
            "They had cake and played games all afternoon."]


PLOTS = [_lost_thing, _share, _weather, _learn, _surprise]


def story(r: random.Random) -> str:
    name, pro, pos = r.choice(HEROES)
    place, friend = r.choice(PLACES), r.choice(FRIENDS)
    short = name.split(" named ")[-1]
    opening = r.choice(OPENINGS).format(hero=name, place=place)
    body = r.choice(PLOTS)(r, short, pro, pos, place, friend)
    ending = r.choice(ENDINGS).format(Pro=_cap(pro))
    sentences = [opening, *body, ending]
    # Paragraph breaks as TinyStories has them: blank lines inside a story.
    cut = sorted(r.sample(range(2, len(sentences) - 1), k=2))
    paras = [sentences[: cut[0]], sentences[cut[0] : cut[1]], sentences[cut[1] :]]
    return "\n\n".join(" ".join(p) for p in paras)


def compose(n: int = 90, seed: int = 7) -> str:
    r = random.Random(seed)
    return "\n<|endoftext|>\n".join(story(r) for _ in range(n)) + "\n"


STORIES_PATH = Path(__file__).with_name("stories.txt")

if __name__ == "__main__":
    text = compose()
    from ..fsio import atomic_write

    atomic_write(STORIES_PATH, text)
    print(f"wrote {STORIES_PATH} ({len(text.encode())} bytes)")
