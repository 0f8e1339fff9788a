// The count a layer keeps for its followers: a stream starts with the value it was
// asked at, keeps only the newest change when its consumer lags, lets go of a
// follower that stopped, and ends when the owner finishes it.

import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct GaugeTests {
    /// Everything `s` holds once it ended (the caller finished it).
    private static func drained(_ s: AsyncStream<Int>) async -> [Int] {
        var got: [Int] = []
        for await v in s { got.append(v) }
        return got
    }

    @Test func aFollowerStartsWithTheValueThenGetsEachChange() async {
        var gauge = Gauge(3)
        let counts = gauge.watch()
        var it = counts.makeAsyncIterator()
        #expect(await it.next() == 3)
        gauge.set(4)
        #expect(await it.next() == 4)
        gauge.set(4)  // no change: nothing is told
        gauge.set(2)
        #expect(await it.next() == 2)
        gauge.finish()
        #expect(await it.next() == nil)
        #expect(gauge.value == 2)
    }

    /// A consumer that lags finds the newest value, not a backlog: a count is state.
    @Test func aLaggingFollowerGetsOnlyTheNewestValue() async {
        var gauge = Gauge()
        let counts = gauge.watch()
        for n in 1...100 { gauge.set(n) }
        gauge.finish()
        #expect(await Self.drained(counts) == [100])
    }

    /// Each follower gets the value at the moment it asked, then the same changes.
    @Test func followersAskedAtDifferentTimesEachStartWhereTheyAsked() async {
        var gauge = Gauge()
        let early = gauge.watch()
        var e = early.makeAsyncIterator()
        #expect(await e.next() == 0)
        gauge.set(1)
        let late = gauge.watch()
        var l = late.makeAsyncIterator()
        #expect(await e.next() == 1)
        #expect(await l.next() == 1)
        gauge.set(5)
        #expect(await e.next() == 5)
        #expect(await l.next() == 5)
    }

    /// A follower asked for after the owner finished holds the last value and ends;
    /// the owner is never left holding it.
    @Test func aFollowerAfterTheEndGetsTheLastValueAndEnds() async {
        var gauge = Gauge(7)
        gauge.finish()
        let after = gauge.watch()
        gauge.set(8)
        #expect(await Self.drained(after) == [7])
    }

    /// A follower whose consumer went away is let go at the next change; the others
    /// go on being told.
    @Test func aFollowerThatStoppedIsLetGo() async {
        var gauge = Gauge()
        let staying = gauge.watch()
        let leaving = gauge.watch()
        let consumer = Task { () -> Int? in
            for await v in leaving where v > 0 { return v }
            return nil
        }
        consumer.cancel()
        #expect(await consumer.value == nil)
        #expect(gauge.followers == 2)
        gauge.set(1)
        #expect(gauge.followers == 1)
        gauge.set(2)
        gauge.finish()
        #expect(gauge.followers == 0)
        #expect(await Self.drained(staying) == [2])
    }
}
