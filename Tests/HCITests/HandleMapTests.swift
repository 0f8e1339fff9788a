// SortedMap / HandleMap: the packet paths' tables by handle behave as the
// dictionaries they replaced, in handle order.

import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct HandleMapTests {
    @Test func entriesStayInHandleOrderWhateverOrderTheyCameIn() {
        var m = HandleMap<String>()
        for h: UInt16 in [0x0042, 0x0001, 0xFFFF, 0x0040, 0x0041] { m[h] = "\(h)" }
        #expect(m.keys == [0x0001, 0x0040, 0x0041, 0x0042, 0xFFFF])
        #expect(m.map(\.value) == ["1", "64", "65", "66", "65535"])
        #expect(m[0x0040] == "64")
        #expect(m[0x0043] == nil)
        m[0x0041] = nil
        #expect(m.removeValue(forKey: 0x0001) == "1")
        #expect(m.removeValue(forKey: 0x0001) == nil)
        #expect(m.keys == [0x0040, 0x0042, 0xFFFF])
        #expect(m.updateValue("x", forKey: 0x0042) == "66")
        #expect(m.updateValue("y", forKey: 0x0000) == nil)
        #expect(m == [0x0000: "y", 0x0040: "64", 0x0042: "x", 0xFFFF: "65535"])
        #expect(m.count == 4)
        m.removeAll()
        #expect(m.isEmpty)
    }

    @Test func valuesChangeInPlaceThroughTheSubscripts() {
        var m: HandleMap<[Int]> = [7: [1]]
        m[7]?.append(2)
        m[8]?.append(3)  // no entry: nothing added
        m[9, default: []].append(4)
        m[9, default: []].append(5)
        #expect(m.dictionary == [7: [1, 2], 9: [4, 5]])
        // Setting the optional to nil through the subscript's in-place access removes the entry.
        m[7] = m[7].flatMap { $0.count > 5 ? $0 : nil }
        #expect(m.keys == [9])
        #expect(m.withValue(for: 9) { $0.removeFirst() } == 4)
        #expect(m.withValue(for: 1) { $0.removeFirst() } == nil)
        #expect(m[9] == [5])
    }

    @Test func aDictionaryComesInSortedAndTheFiltersKeepTheOrder() {
        let d: [UInt16: Int] = [5: 50, 1: 10, 3: 30, 2: 20]
        let m = HandleMap(d)
        #expect(m.keys == [1, 2, 3, 5])
        #expect(m.filter { $0.value > 15 }.keys == [2, 3, 5])
        #expect(m.mapValues { $0 / 10 }.values == [1, 2, 3, 5])
        #expect(m.dictionary == d)
        #expect(m.contains(3) && !m.contains(4))
        #expect(HandleMap<Int>([0x0040: 1, 0x0001: 2]).description == "[0x0001: 2, 0x0040: 1]")
        // Any comparable key: a pair orders by its first part, then its second.
        struct Key: Comparable { var a: UInt16, b: UInt16; static func < (x: Key, y: Key) -> Bool { (x.a, x.b) < (y.a, y.b) } }
        var s = SortedMap<Key, Int>()
        s[Key(a: 2, b: 1)] = 1; s[Key(a: 1, b: 9)] = 2; s[Key(a: 2, b: 0)] = 3
        #expect(s.values == [2, 3, 1])
    }
}
