// `btctl gatt discover` against Bumble as a hostile GATT server, on Rootcanal:
// bumble_hostile_peripheral.py takes Bumble's ATT layer off the link and answers our
// requests by hand, each connection lying in one way (a declaration at handle 0, handles
// that go backwards, a Find Information answer that never moves on, a wrong opcode, a
// response longer than ATT_MTU, entries of an undefined length, an Error Response for
// another request). btctl must end with the typed error naming the lie, exit non-zero,
// and ask only a few requests: never a crash, never a loop (issue 9, item 3).

import BLETesting
import Foundation
import Testing

@Suite(.serialized) struct BumbleHostilePeripheralTests {
    /// Each mode, and what btctl's error must say.
    static let cases: KeyValuePairs<String, String> = [
        "zero-handle": "the server's Read By Type Response lists handle 0x0000 outside the range asked for (0x0001–0x0005)",
        "not-increasing": "the server's Read By Type Response lists handle 0x0002 after 0x0003; handles must increase",
        "find-info-repeat": "the server's Find Information Response lists handle 0x0004 outside the range asked for (0x0005–0x0005)",
        "wrong-opcode": "the peer answered Read By Group Type Request with a Read Response",
        "oversized": "the server's Read By Group Type Response is 26 bytes; ATT_MTU is 23",
        "entry-length": "the server's Read By Group Type Response entry at 0x0001 is malformed",
        "error-for-another": "the peer answered Read By Group Type Request with an Error Response for Read Request",
    ]

    @Test func btctlDiscoverEndsWithTheLieNamed() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_peripheral.py", String(rc.hciPort)]
                                     + Self.cases.map(\.key))
        #expect(await bumble.waitForOutput { $0.contains("\"advertising\"") })
        for (mode, named) in Self.cases {
            // Within btctl's 5 s command timeout: a lie must end discovery, not a timeout.
            let started = ContinuousClock.now
            let run = try await BtctlGATTTests.run(["gatt", "discover", "F1:F2:F3:F4:F5:F7/random", "-t", rc.transportSpec])
            #expect(run.status == 1, "\(mode): \(run.out)")
            #expect(run.out.contains("Error: discovery failed: " + named), "\(mode): \(run.out)")
            #expect(ContinuousClock.now - started < .seconds(15), "\(mode)")
            #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"disconnected\", \"mode\": \"\(mode)\"") }, "\(mode)")
        }
        #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"done\"") })
        _ = await bumble.stop()
        let lines = bumble.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let ended = Dictionary(lines.filter { $0["event"] as? String == "disconnected" }.compactMap { l -> (String, Int)? in
            guard let m = l["mode"] as? String, let n = l["requests"] as? Int else { return nil }
            return (m, n)
        }, uniquingKeysWith: { a, _ in a })
        // A handful of requests each (Exchange MTU, then discovery up to the lie): no loop.
        for (mode, _) in Self.cases { #expect((1...8).contains(ended[mode] ?? 0), "\(mode): \(ended)") }
    }
}
