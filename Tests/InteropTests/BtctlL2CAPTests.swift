// `btctl l2cap connect` as a user runs it: a real btctl process on Rootcanal opens a
// channel to Bumble's echo server (bumble_l2cap_peer.py server), pipes a file in on
// standard input, and must print the same bytes back on standard output. And `btctl
// l2cap listen`: Bumble's client opens a channel to it and gets what is typed on
// btctl's standard input, while btctl prints what Bumble sends.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlL2CAPTests {
    /// Both modes; in enhanced mode with credits enough for the whole echo (Bumble
    /// 0.0.236 does not see credits given back on enhanced channels it accepted, see
    /// BumbleL2CAPTests).
    @Test(arguments: [[], ["--enhanced", "--credits", "100"]])
    func connectPipesStdinThroughBumblesEcho(mode: [String]) async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let peer = Process()
        peer.executableURL = URL(fileURLWithPath: python)
        peer.arguments = [Interop.root + "/Tests/InteropTests/bumble_l2cap_peer.py", String(rc.hciPort), "server"]
        peer.standardOutput = FileHandle.nullDevice
        peer.standardError = FileHandle.nullDevice
        try peer.run()
        defer { RootcanalProcess.kill(peer) }

        let input = (0..<5000).map { UInt8(($0 * 7) & 0xFF) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-l2cap-\(getpid()).bin")
        try Data(input).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let btctl = Process()
        btctl.executableURL = URL(fileURLWithPath: BtctlGATTTests.btctl)
        btctl.arguments = ["l2cap", "connect", "F1:F2:F3:F4:F5:F6/random", "--spsm", "0x80", "--mtu", "512", "--wait", "2", "-t", rc.transportSpec] + mode
        btctl.standardInput = try FileHandle(forReadingFrom: file)
        let out = Pipe(), err = Pipe()
        btctl.standardOutput = out
        btctl.standardError = err
        try btctl.run()
        async let read = Interop.readAll(out), readErr = Interop.readAll(err)
        let status = await Interop.exit(of: btctl)
        let output = await read
        let messages = String(decoding: await readErr, as: UTF8.self)
        #expect(status == 0, "\(messages)")
        #expect(Array(output) == input, "\(output.count) bytes back; \(messages)")
        #expect(messages.contains("sent 5000 bytes, received 5000"), "\(messages)")
        #expect(messages.contains("enhanced channel") == !mode.isEmpty, "\(messages)")
    }

    @Test func listenTakesBumblesChannelBothWays() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let listener = try LiveProcess(BtctlGATTTests.btctl, ["l2cap", "listen", "0x82", "--json", "--wait", "5", "--duration", "60", "-t", rc.transportSpec])
        #expect(await listener.waitForOutput { $0.contains("\"event\":\"listening\"") }, "\(listener.output)")
        // The address btctl listens at, as it says. The test used to assume the first
        // controller of a fresh Rootcanal, DA:4C:10:DE:17:00; in one loaded run Bumble
        // never reached btctl there (perhaps the readiness probe's connection got it).
        let listening = try #require(BtctlServeTests.events(listener.output).first { $0["event"] as? String == "listening" })
        let address = try #require(listening["address"] as? String, "\(listening)")
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_l2cap_peer.py", String(rc.hciPort), "client", address, "3000"])
        #expect(await bumble.waitForOutput(within: .seconds(45)) { $0.contains("\"event\": \"channel\"") }, "\(bumble.output)")
        // Bumble's client takes SDUs once it reports the channel: type 3000 bytes then.
        let line = String(repeating: "0123456789", count: 10).dropLast()
        for _ in 0..<30 { listener.send(String(line)) }
        listener.closeInput()
        // Bumble closes the channel, then the link, which btctl may have ended first
        // (its channel closed, it disconnects): "channel-closed" is Bumble's last sure word.
        #expect(await bumble.waitForOutput(within: .seconds(45)) { $0.contains("\"event\": \"channel-closed\"") }, "\(bumble.output)")
        // What Bumble got back is what was typed (its own pattern differs, so `same` is false).
        #expect(bumble.output.contains("\"event\": \"echoed\", \"bytes\": 3000"), "\(bumble.output)")
        #expect(await listener.exit(timeout: 30) == 0, "\(listener.output)")
        let events = BtctlServeTests.events(listener.output)
        let received = events.filter { $0["event"] as? String == "sdu" }.compactMap { $0["length"] as? Int }.reduce(0, +)
        #expect(received == 3000, "\(listener.output)")
        let closed = try #require(events.last { $0["event"] as? String == "closed" }, "\(listener.output)")
        #expect(closed["sent"] as? Int == 3000 && closed["received"] as? Int == 3000, "\(closed)")
        _ = await bumble.stop()
    }
}
