// The fire-alarm example as a user runs it: FireAlarmSender and FireAlarmReceiver
// as separate processes on Rootcanal, and `btctl demo` on the virtual radio.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct FireAlarmTests {
    static func binary(_ name: String) -> String? {
        let path = Interop.root + "/.build/debug/" + name
        if FileManager.default.isExecutableFile(atPath: path) { return path }
        if Interop.required { Issue.record("\(name) is not built at \(path)") }
        return nil
    }

    /// Each JSON line's fields as text (numbers and booleans by their JSON spelling).
    static func events(_ out: String) -> [[String: String]] {
        out.split(separator: "\n").compactMap { line -> [String: String]? in
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return o.mapValues { v in
                if let text = v as? String { return text }
                let fragment = try? JSONSerialization.data(withJSONObject: v, options: .fragmentsAllowed)
                return fragment.map { String(decoding: $0, as: UTF8.self) } ?? "\(v)"
            }
        }
    }

    @Test func senderAndReceiverProcessesOnRootcanal() async throws {
        guard let rcBinary = try Interop.rootcanal(), let senderPath = Self.binary("FireAlarmSender"),
              let receiverPath = Self.binary("FireAlarmReceiver") else { return }
        let rc = try await RootcanalProcess.launch(binary: rcBinary)
        defer { rc.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("firealarm-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }

        let sender = Process()
        sender.executableURL = URL(fileURLWithPath: senderPath)
        // A generous command timeout: the suite starts many Rootcanals and Bumbles at once,
        // and a first Reset has waited over 5 s for a loaded Rootcanal.
        sender.arguments = ["-t", rc.transportSpec, "--json", "--name", "FireAlarm-RC", "--alarm-after", "0.2", "--timeout", "30"]
        let senderOut = Pipe()
        sender.standardOutput = senderOut
        sender.standardInput = Pipe()  // stays open: the sender keeps serving
        try sender.run()
        defer { if sender.isRunning { sender.terminate() } }

        let receiver = try await Interop.execute(receiverPath, ["-t", rc.transportSpec, "--json", "--once", "--scan-time", "1",
                                                          "--name", "rc-receiver", "--save", dir, "--timeout", "30"], timeout: 90)
        #expect(receiver.status == 0, "\(receiver.out)")
        let r = Self.events(receiver.out)
        let steps = r.map { $0["event"] ?? "" }
        for step in ["found", "connected", "subscribed", "alarm", "text", "distance", "floor_plan", "acknowledged"] {
            #expect(steps.contains(step), "receiver never reached '\(step)': \(steps)")
        }
        #expect(r.first { $0["event"] == "found" }?["name"] == "FireAlarm-RC")
        #expect(r.first { $0["event"] == "floor_plan" }?["crc_ok"] == "true")
        #expect(r.first { $0["event"] == "text" }?["text"]?.hasPrefix("FIRE in building B") == true)
        let saved = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(saved.count == 1)
        if let f = saved.first, let d = FileManager.default.contents(atPath: dir + "/" + f) {
            #expect(String(decoding: d, as: UTF8.self).hasPrefix("<svg"))
        }

        sender.terminate()
        _ = await Interop.exit(of: sender)
        let s = Self.events(String(decoding: await Interop.readAll(senderOut), as: UTF8.self))
        #expect(s.contains { $0["event"] == "acknowledged" && $0["by"] == "rc-receiver" }, "\(s)")
        #expect(s.contains { $0["event"] == "indicated" && $0["confirmed"]?.isEmpty == false }, "\(s)")
    }

    @Test func btctlDemoRunsTheWholeSessionWithoutHardware() async throws {
        guard let btctl = Self.binary("btctl") else { return }
        let out = try await Interop.execute(btctl, ["demo", "--json", "--distance", "10"], timeout: 60)
        #expect(out.status == 0, "\(out.out)")
        let e = Self.events(out.out)
        #expect(e.first { $0["role"] == "receiver" && $0["event"] == "distance" }?["metres"].flatMap(Double.init) == 10)
        #expect(e.first { $0["role"] == "receiver" && $0["event"] == "floor_plan" }?["crc_ok"] == "true")
        #expect(e.contains { $0["role"] == "sender" && $0["event"] == "acknowledged" })
        // Bad arguments: a clear message and a non-zero status.
        let bad = try await Interop.execute(btctl, ["demo", "--distance", "-1"], timeout: 30, mergeStderr: true)
        #expect(bad.status == 64 && bad.out.contains("--distance must be between 0.1 and 1000 metres"), "\(bad.out)")
        let missing = try await Interop.execute(btctl, ["demo", "--save", "/nonexistent/folder"], timeout: 30, mergeStderr: true)
        #expect(missing.status == 64 && missing.out.contains("--save: /nonexistent/folder is not a directory"), "\(missing.out)")
    }
}
