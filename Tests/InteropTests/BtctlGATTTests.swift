// `btctl gatt` as a user runs it: real btctl processes on Rootcanal, one serving
// docs/examples/battery.json, the other discovering, reading and writing by name.

import BLETesting
import Foundation
import Testing

@Suite(.serialized) struct BtctlGATTTests {
    static var btctl: String { Interop.root + "/.build/debug/btctl" }

    /// Whether btctl is built; when it is not, a run that requires interop records why.
    static func isBuilt(sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        guard FileManager.default.isExecutableFile(atPath: btctl) else {
            if Interop.required { Issue.record("btctl is not built at \(btctl)", sourceLocation: sourceLocation) }
            return false
        }
        return true
    }

    static func run(_ args: [String]) async throws -> (status: Int32, out: String) {
        try await Interop.execute(btctl, args, timeout: 30, mergeStderr: true)
    }

    @Test func serveDiscoverReadWriteByName() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        guard Self.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let t = rc.transportSpec
        let server = Process()
        server.executableURL = URL(fileURLWithPath: Self.btctl)
        server.arguments = ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", t, "--json", "--duration", "30"]
        let serverOut = Pipe()
        server.standardOutput = serverOut
        try server.run()
        defer { if server.isRunning { server.terminate() } }

        let discover = try await Self.run(["gatt", "discover", "--name", "btctl-battery", "-t", t, "--json"])
        #expect(discover.status == 0, "\(discover.out)")
        let lines = discover.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.contains { $0["event"] as? String == "service" && $0["uuid"] as? String == "180F" })
        #expect(lines.contains { $0["event"] as? String == "characteristic" && $0["uuid"] as? String == "2A19" && ($0["properties"] as? [String]) == ["read", "notify"] })
        #expect(lines.contains { $0["event"] as? String == "descriptor" && $0["uuid"] as? String == "2901" })

        let read = try await Self.run(["gatt", "read", "--name", "btctl-battery", "--uuid", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E", "-t", t, "--json"])
        #expect(read.status == 0)
        #expect(read.out.contains("\"text\":\"hello from btctl\""), "\(read.out)")

        let long = String(repeating: "y", count: 100)
        let write = try await Self.run(["gatt", "write", "--name", "btctl-battery", "--uuid", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "--text", long, "-t", t])
        #expect(write.status == 0, "\(write.out)")

        let missing = try await Self.run(["gatt", "read", "--name", "nobody", "--handle", "3", "-t", t, "--connect-timeout", "1"])
        #expect(missing.status != 0)
        #expect(missing.out.contains("no device named 'nobody'"))

        server.terminate()
        _ = await Interop.exit(of: server)
        let served = String(decoding: await Interop.readAll(serverOut), as: UTF8.self)
        #expect(served.contains("\"event\":\"written\""), "\(served)")
        #expect(served.contains(Array(long.utf8).map { String(format: "%02x", $0) }.joined()), "the 100-byte write did not arrive whole")
    }
}
