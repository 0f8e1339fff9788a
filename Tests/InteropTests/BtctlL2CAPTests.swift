// `btctl l2cap connect` as a user runs it: a real btctl process on Rootcanal opens a
// channel to Bumble's echo server (bumble_l2cap_peer.py server), pipes a file in on
// standard input, and must print the same bytes back on standard output.

import BLETesting
import Foundation
import Testing

@Suite(.serialized) struct BtctlL2CAPTests {
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
}
