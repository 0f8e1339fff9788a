// `btctl monitor` as a tap: Bumble (Google's Python host) reaches Rootcanal through
// btctl, which decodes every packet as it passes; a btctl on Rootcanal's own port reads
// Bumble's GATT server. The live frames match the trace-show schema, the ATT exchange
// shows in both directions, SIGINT ends the tap with 130, and tshark reads the
// recording without a malformed frame. The kernel's monitor channel needs a kernel with
// Bluetooth: here it must fail with the explanation.

import BLETesting
import Foundation
import Snoop
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlMonitorTests {
    @Test func tapBetweenBumbleAndRootcanal() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python(), let tshark = try Interop.tshark() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let file = BtctlCLITests.temporary("tap.btsnoop")
        let monitor = try LiveProcess(BtctlGATTTests.btctl, ["monitor", "--listen", "127.0.0.1:0", "-t", rc.transportSpec, "--json", "--btsnoop", file],
                                      mergeStderr: true)
        #expect(await monitor.waitForOutput { $0.contains("for a host;") }, "\(monitor.output)")
        let port = try #require(monitor.output.split(separator: "\n").first { $0.contains("listening on tcp:127.0.0.1:") }
            .flatMap { $0.split(separator: ":").dropFirst(3).first?.split(separator: " ").first }.flatMap { UInt16($0) }, "\(monitor.output)")

        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_peripheral.py", String(port), "--forever"])
        // Bumble's initialisation goes through the tap; it says when it advertises.
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"advertising\"") }, "\(monitor.output)\n\(bumble.output)")
        let read = try await BtctlGATTTests.run(["gatt", "read", "F1:F2:F3:F4:F5:F6/random", "--uuid", "FFF1", "-t", rc.transportSpec])
        #expect(read.status == 0 && read.out.contains("\"bumble\""), "\(read.out)")
        #expect(await monitor.waitForOutput { $0.contains("\"att_name\":\"Read Response\"") }, "\(monitor.output)")
        kill(monitor.process.processIdentifier, SIGINT)
        let status = await monitor.exit(timeout: 20)
        #expect(status == 130, "\(monitor.output.split(separator: "\n").filter { !$0.hasPrefix("{") })")
        _ = await bumble.stop()

        let lines = monitor.output.split(separator: "\n").filter { $0.hasPrefix("{") }.joined(separator: "\n")
        let frames = try JSONSchemaTests.check(lines, against: "trace-show")
        // Bumble's side of the link: its commands go to the controller (tx), the read request comes up (rx).
        #expect(frames.contains { $0["dir"] as? String == "tx" && $0["name"] as? String == "Reset" })
        #expect(frames.contains { $0["dir"] as? String == "tx" && ($0["name"] as? String)?.hasSuffix("Advertising Enable") == true })
        #expect(frames.contains { $0["dir"] as? String == "rx" && $0["att_name"] as? String == "Read Request" })
        #expect(frames.contains { $0["dir"] as? String == "tx" && $0["att_name"] as? String == "Read Response" })
        #expect(monitor.output.contains("btctl: host connected"))
        #expect(monitor.output.contains("btctl: stopped: \(frames.count) frames"), "the closing summary counts the frames")

        let recorded = try TraceReader.read(contentsOf: file)
        #expect(recorded.records.count == frames.count, "every frame shown was recorded")
        let listed = try await Interop.run(tshark, ["-r", file])
        #expect(listed.split(separator: "\n").count == recorded.records.count)
        let malformed = try await Interop.run(tshark, ["-r", file, "-Y", "_ws.malformed || _ws.expert.severity == error"])
        #expect(malformed.isEmpty, "\(malformed)")
    }

    @Test func kernelChannelAndArguments() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let kernel = try await BtctlCLITests.run(["monitor", "--duration", "0.5"])
        if FileManager.default.fileExists(atPath: "/sys/class/bluetooth") {
            #expect(kernel.status == 0 || kernel.out.contains("needs CAP_NET_RAW"), "\(kernel.out)")
        } else {
            #expect(kernel.status == 1 && kernel.out.contains("this kernel has no Bluetooth support"), "\(kernel.out)")
        }
        let handle = try await BtctlCLITests.run(["monitor", "--listen", "0", "-t", "virtual", "--handle", "0xF000"])
        #expect(handle.status == 64 && handle.out.contains("--handle must be a connection handle from 0 to 0x0EFF"), "\(handle.out)")
        let noListen = try await BtctlCLITests.run(["monitor", "-t", "virtual"])
        #expect(noListen.status == 64 && noListen.out.contains("give --listen too"), "\(noListen.out)")
        let port = try await BtctlCLITests.run(["monitor", "--listen", "127.0.0.1:70000", "-t", "virtual"])
        #expect(port.status == 64 && port.out.contains("--listen takes [HOST:]PORT"), "\(port.out)")
    }

    /// `btctl monitor … | head`: once the reader has quit, the tap ends as on a signal
    /// (both sides closed, the summary on stderr) and exits 0, instead of forwarding on.
    @Test func aClosedStandardOutputEndsTheTap() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        // The reader is gone before the first frame; btctl's stderr and its exit status come to us on fd 3.
        let script = "{ \"$0\" monitor --listen 127.0.0.1:0 -t virtual --json 2>&3 | true; echo \"status ${PIPESTATUS[0]}\" >&3; } 3>&1"
        let tap = try LiveProcess("/bin/bash", ["-c", script, BtctlGATTTests.btctl])
        #expect(await tap.waitForOutput { $0.contains("for a host;") }, "\(tap.output)")
        let port = try #require(tap.output.split(separator: "\n").first { $0.contains("listening on tcp:127.0.0.1:") }
            .flatMap { $0.split(separator: ":").dropFirst(3).first?.split(separator: " ").first }.flatMap { UInt16($0) }, "\(tap.output)")
        // A host initialising the controller through the tap: far more than two frames.
        _ = try await BtctlCLITests.run(["info", "-t", "tcp:127.0.0.1:\(port)"])
        #expect(await tap.waitForOutput { $0.contains("status ") }, "\(tap.output)")
        #expect(tap.output.contains("btctl: standard output closed: "), "\(tap.output)")
        #expect(tap.output.contains("status 0"), "\(tap.output)")
        _ = await tap.stop()
    }
}
