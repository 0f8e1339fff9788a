// Facade tests whose subject is time (a duration that runs out, a timer that asks
// for something after 5 s) run the virtual radio and its hosts on a
// `NIOAsyncTestingEventLoop`: the stack's timers are the loop's, so the loop's time
// passes only when the test moves it, and a 5 s wait costs no wall-clock time.

import BLE
import NIOCore
import NIOEmbedded
import Testing

extension NIOAsyncTestingEventLoop {
    /// Runs `body` while moving this loop's time on by `step` at a time (about every
    /// millisecond of wall-clock time), for a call that sleeps on the loop (a scan
    /// with a window) where the test cannot tell when the call arms its timer. Time
    /// goes on past what `body` needed by at most `step`. Returns what `body` returns.
    func advancing<T: Sendable>(by step: TimeAmount = .milliseconds(50), _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { g in
            g.addTask { try await body() }
            g.addTask {
                while !Task.isCancelled {
                    await self.advanceTime(by: step)
                    try? await Task.sleep(for: .milliseconds(1))
                }
                return nil
            }
            defer { g.cancelAll() }
            while let r = try await g.next() {
                if let r { return r }
            }
            throw CancellationError()
        }
    }
}

extension AdvertisingLimitsTests {
    /// The names `host` hears in a scan of 200 ms of `loop`'s time.
    static func names(heardBy host: BluetoothHost, on loop: NIOAsyncTestingEventLoop) async throws -> Set<String> {
        try await loop.advancing { try await names(heardBy: host) }
    }
}

extension AdvertisingLimitsTests {
    /// Runs `meanwhile` (which may move `loop`'s time on), then checks that nothing
    /// ended on `early` until 10 ms before `duration` of `loop`'s time from the call,
    /// and moves the time to `duration`. The advertising that should end then was
    /// enabled before the call (its timer armed at the call's time).
    static func endsAfter(_ duration: TimeAmount, of loop: NIOAsyncTestingEventLoop, early: BufferedStream<PeripheralEvent>,
                          meanwhile: () async throws -> Void) async throws {
        let start = loop.now
        try await meanwhile()
        #expect(loop.now < start + duration - .milliseconds(10))
        await loop.advanceTime(to: start + duration - .milliseconds(10))
        #expect(await ended(early, within: .milliseconds(300)) == nil)
        await loop.advanceTime(to: start + duration)
    }
}
