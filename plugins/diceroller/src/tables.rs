//! Random tables rolled with a d100. Each entry covers an inclusive range of
//! d100 results, so an entry's weight is the width of its range.

/// One entry: the d100 results `low..=high` give `text`.
pub struct Entry {
    /// Lowest d100 result for this entry.
    pub low: u32,
    /// Highest d100 result for this entry.
    pub high: u32,
    /// What happens.
    pub text: &'static str,
}

/// A named d100 table.
pub struct Table {
    /// Name used in `roll_table`'s `table_name`.
    pub name: &'static str,
    /// What the table is for.
    pub description: &'static str,
    /// Entries covering 1..=100 without gaps or overlaps.
    pub entries: &'static [Entry],
}

const fn e(low: u32, high: u32, text: &'static str) -> Entry {
    Entry { low, high, text }
}

/// Every table the plugin knows.
pub static TABLES: &[Table] = &[
    Table {
        name: "wild_magic",
        description: "Wild magic surge: what happens when raw magic slips its leash",
        entries: &[
            e(
                1,
                2,
                "Roll on this table at the start of each of your turns for the next minute, ignoring this result on later rolls.",
            ),
            e(3, 4, "For the next minute you can see any invisible creature within 60 feet of you."),
            e(
                5,
                6,
                "A modron appears in an unoccupied space within 5 feet of you, stares at you, and vanishes one minute later.",
            ),
            e(7, 8, "You cast Fireball centred on yourself."),
            e(9, 10, "You cast Magic Missile as a 5th-level spell."),
            e(11, 12, "Your height changes by 1d10 inches: odd, you shrink; even, you grow."),
            e(13, 14, "You cast Confusion centred on yourself."),
            e(15, 16, "For the next minute you regain 5 hit points at the start of each of your turns."),
            e(17, 18, "You grow a long beard made of feathers that stays until you sneeze."),
            e(19, 20, "You cast Grease centred on yourself."),
            e(
                21,
                22,
                "Creatures have disadvantage on saving throws against the next spell you cast in the next minute that involves a saving throw.",
            ),
            e(23, 24, "Your skin turns a vibrant shade of blue until a Remove Curse spell ends the effect."),
            e(
                25,
                26,
                "An eye appears on your forehead for the next minute, giving you advantage on Wisdom (Perception) checks that rely on sight.",
            ),
            e(
                27,
                28,
                "For the next minute all your spells with a casting time of 1 action have a casting time of 1 bonus action.",
            ),
            e(29, 30, "You teleport up to 60 feet to an unoccupied space of your choice that you can see."),
            e(
                31,
                32,
                "You are transported to the Astral Plane until the end of your next turn, then return to the space you left or the nearest free one.",
            ),
            e(33, 34, "Maximize the damage of the next damaging spell you cast within the next minute."),
            e(
                35,
                36,
                "Roll a d10. Your age changes by that many years: odd, younger (minimum 1 year old); even, older.",
            ),
            e(37, 38, "1d6 flumphs appear within 60 feet of you, frightened of you; they vanish after one minute."),
            e(39, 40, "You regain 2d10 hit points."),
            e(
                41,
                42,
                "You turn into a potted plant until the start of your next turn, incapacitated and vulnerable to all damage.",
            ),
            e(43, 44, "For the next minute you can teleport up to 20 feet as a bonus action on each of your turns."),
            e(45, 46, "You cast Levitate on yourself."),
            e(47, 48, "A unicorn appears within 5 feet of you, then disappears one minute later."),
            e(49, 50, "You can't speak for the next minute. Whenever you try, pink bubbles float out of your mouth."),
            e(
                51,
                52,
                "A spectral shield hovers near you for the next minute, granting you +2 AC and immunity to Magic Missile.",
            ),
            e(53, 54, "You are immune to being intoxicated by alcohol for the next 5d6 days."),
            e(55, 56, "Your hair falls out but grows back within 24 hours."),
            e(
                57,
                58,
                "For the next minute any flammable object you touch that isn't worn or carried bursts into flame.",
            ),
            e(59, 60, "You regain your lowest-level expended spell slot."),
            e(61, 62, "For the next minute you must shout when you speak."),
            e(63, 64, "You cast Fog Cloud centred on yourself."),
            e(65, 66, "Up to three creatures you choose within 30 feet take 4d10 lightning damage."),
            e(67, 68, "You are frightened by the nearest creature until the end of your next turn."),
            e(
                69,
                70,
                "Each creature within 30 feet of you becomes invisible for the next minute, until it attacks or casts a spell.",
            ),
            e(71, 72, "You gain resistance to all damage for the next minute."),
            e(73, 74, "A random creature within 60 feet of you becomes poisoned for 1d4 hours."),
            e(
                75,
                76,
                "You glow with bright light in a 30-foot radius for the next minute; creatures ending their turn within 5 feet are blinded until their next turn ends.",
            ),
            e(
                77,
                78,
                "You cast Polymorph on yourself; failing the save turns you into a sheep for the spell's duration.",
            ),
            e(
                79,
                80,
                "Illusory butterflies and flower petals flutter in the air within 10 feet of you for the next minute.",
            ),
            e(81, 82, "You can take one additional action immediately."),
            e(
                83,
                84,
                "Each creature within 30 feet of you takes 1d10 necrotic damage; you regain hit points equal to the total dealt.",
            ),
            e(85, 86, "You cast Mirror Image."),
            e(87, 88, "You cast Fly on a random creature within 60 feet of you."),
            e(
                89,
                90,
                "You become invisible for the next minute; other creatures can't hear you. It ends if you attack or cast a spell.",
            ),
            e(
                91,
                92,
                "If you die within the next minute, you immediately come back to life as if by the Reincarnate spell.",
            ),
            e(93, 94, "Your size increases by one category for the next minute."),
            e(
                95,
                96,
                "You and all creatures within 30 feet of you gain vulnerability to piercing damage for the next minute.",
            ),
            e(97, 98, "You are surrounded by faint, ethereal music for the next minute."),
            e(99, 100, "You regain all expended sorcery points."),
        ],
    },
    Table {
        name: "treasure_hoard",
        description: "Treasure hoard for a challenge 5-10 lair",
        entries: &[
            e(1, 4, "2,000 cp, 6,000 sp and 200 gp in a rotting chest; nothing else of value."),
            e(5, 10, "A pouch of 2d4 gems worth 25 gp each (azurite, blue quartz) and 300 gp in loose coin."),
            e(11, 16, "3d6 art objects worth 25 gp each: silver ewers, carved bone statuettes, small gold bracelets."),
            e(17, 22, "3d6 gems worth 50 gp each (bloodstone, carnelian, jasper) and a Potion of Healing."),
            e(
                23,
                28,
                "2d4 art objects worth 250 gp each (gold rings set with bloodstones, a silk robe with gold embroidery).",
            ),
            e(29, 32, "3d6 gems worth 100 gp each (amber, amethyst, jade) and a Spell Scroll of a 2nd-level spell."),
            e(33, 36, "A Bag of Holding wrapped around 400 gp and a map to a second cache."),
            e(37, 40, "2d4 art objects worth 25 gp each and a Potion of Greater Healing in a cracked flask."),
            e(41, 44, "A Wand of Magic Missiles (5 charges left) and 3d6 gems worth 50 gp each."),
            e(45, 49, "A +1 longsword with a dragon-scale scabbard and 2d4 gems worth 100 gp each."),
            e(50, 54, "Boots of Elvenkind and a coffer with 1,000 gp."),
            e(55, 59, "A Cloak of Protection, a Potion of Fire Breath and 2d6 gems worth 50 gp each."),
            e(60, 64, "A Ring of Protection on a skeletal finger and 500 pp in a locked iron box."),
            e(65, 69, "A Stone of Good Luck, 3d6 art objects worth 25 gp each and a deck of marked cards."),
            e(70, 74, "A Pearl of Power, a Spell Scroll of a 3rd-level spell and 2d4 gems worth 250 gp each."),
            e(75, 79, "A Bracers of Defense set and 1d4 Potions of Healing."),
            e(80, 84, "A Flame Tongue shortsword and 2d4 art objects worth 250 gp each."),
            e(85, 89, "A Headband of Intellect, a Gem of Seeing and 1,200 gp."),
            e(90, 94, "A Staff of the Python, an Immovable Rod and 3d6 gems worth 100 gp each."),
            e(95, 98, "A Ring of Spell Storing holding one 2nd-level spell and 2d4 gems worth 750 gp each."),
            e(99, 100, "A Sun Blade of ancient make, a Manual of Bodily Health and a dragon's tooth worth 500 gp."),
        ],
    },
    Table {
        name: "random_encounter",
        description: "Random encounter on a forest road, for a party of levels 1-4",
        entries: &[
            e(1, 10, "Nothing but birdsong and a fallen tree across the road."),
            e(11, 18, "A merchant caravan with two guards (use guard stat blocks) that offers to trade."),
            e(19, 26, "1d6 + 2 wolves stalk the party from the treeline and attack at dusk."),
            e(27, 32, "A pair of brown bears fighting over a beehive."),
            e(33, 40, "2d4 goblins have set a tripwire snare across the road and wait in ambush."),
            e(41, 46, "A lone elf druid asks for help finding a missing owlbear cub."),
            e(47, 52, "1d4 + 1 bandits demand a toll of 5 gp each."),
            e(53, 57, "An owlbear, enraged, tears through the undergrowth."),
            e(58, 63, "A circle of mushrooms; anyone who steps inside hears faint laughter."),
            e(64, 69, "1d4 giant spiders have strung webs between the trees above the road."),
            e(70, 74, "A hobgoblin patrol of 1d4 + 2 hobgoblins marching in formation."),
            e(75, 79, "A dryad watches from an oak and warns the party away from the old shrine."),
            e(80, 84, "A wounded knight on a dying horse begs the party to carry a sealed letter."),
            e(85, 89, "1d6 zombies shamble out of a flooded barrow."),
            e(90, 94, "A green hag disguised as an old woman selling apples."),
            e(95, 98, "An ogre sits in the road counting stolen sheep."),
            e(99, 100, "A young green dragon circles overhead, looking for something to eat."),
        ],
    },
];

/// Finds the entry for a d100 result.
pub fn lookup(table: &Table, roll: u32) -> &'static str {
    table.entries.iter().find(|e| (e.low..=e.high).contains(&roll)).map(|e| e.text).expect("tables cover 1..=100")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_covers_1_to_100_exactly_once() {
        for table in TABLES {
            let mut next = 1;
            for entry in table.entries {
                assert_eq!(entry.low, next, "{}: gap or overlap at {}", table.name, next);
                assert!(entry.high >= entry.low, "{}", table.name);
                next = entry.high + 1;
            }
            assert_eq!(next, 101, "{} ends at {}", table.name, next - 1);
        }
    }

    #[test]
    fn lookup_respects_weights() {
        let t = TABLES.iter().find(|t| t.name == "random_encounter").unwrap();
        assert_eq!(lookup(t, 1), lookup(t, 10));
        assert_ne!(lookup(t, 10), lookup(t, 11));
    }
}
