// btctl behaving as a Unix tool (docs/btctl.md "Exit status"): signals end commands
// cleanly with 130/143, arguments are validated with the command's usage, negative
// numbers parse, `-t virtual` runs on the in-process radio, and `trace convert`
// writes captures tshark reads without a malformed frame.

import BLETesting
import Foundation
import HCI
import Snoop
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlCLITests {
    static func run(_ args: [String], interrupt: (signal: Int32, whenOutputContains: String)? = nil) async throws -> (status: Int32, out: String) {
        try await Interop.execute(BtctlGATTTests.btctl, args, timeout: 60, mergeStderr: true, interrupt: interrupt)
    }

    static func temporary(_ name: String) -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-cli-\(getpid())").path
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir + "/" + name
    }

    /// A command that runs until a signal or its --duration ends when its controller
    /// goes away (Rootcanal stopped under it, standard input still open): what it
    /// prints at its end (a scan's table, serving's summary) still comes, then "the
    /// controller went away" with the transport's reason, and exit status 1. Before,
    /// `scan`, `advertise` and `shell` went on to their --duration or a signal.
    @Test(arguments: [
        (["scan", "--duration", "60"], "first report per device"),
        (["advertise", "--name", "gone", "--duration", "60"], "advertising"),
        (["shell"], "type 'help' for commands"),
        (["gatt", "serve", "docs/examples/battery.json", "--json"], "\"event\":\"advertising\""),
    ])
    func aLongRunningCommandEndsWhenTheControllerGoesAway(args: [String], started: String) async throws {
        guard let binary = try Interop.rootcanal() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let command = try LiveProcess(BtctlGATTTests.btctl, args.map { $0.hasPrefix("docs/") ? Interop.root + "/" + $0 : $0 } + ["-t", rc.transportSpec],
                                      mergeStderr: true)
        #expect(await command.waitForOutput { $0.contains(started) }, "\(command.output)")
        rc.stop()
        #expect(await command.exit(timeout: 10) == 1, "\(command.output)")
        let out = command.output
        #expect(out.hasSuffix("Error: the controller went away: the controller closed the connection\n"), "\(out)")
        if args[0] == "scan" { #expect(out.contains("btctl: nothing heard\n"), "\(out)") }
        if args[0] == "gatt" { #expect(BtctlServeTests.events(out).last?["event"] as? String == "summary", "\(out)") }
    }

    /// Arguments come from outside the process: a value no option takes (fullwidth or
    /// Arabic-Indic digits, NaN, infinities, an empty string, a bare "0x", an emoji)
    /// in every numeric, address, UUID, handle and hex option is refused with the
    /// command's usage and exit status 64, never a trap (`btctl hci reset ０１` once
    /// trapped: `Character.isHexDigit` takes fullwidth digits that no radix-16 parse
    /// reads). Four commands at a time; each one that is refused ends at once.
    @Test func noOptionTrapsOnAValueFromOutsideItsRange() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let values = ["０１", "٣", "nan", "-inf", "1e400", "", "0x", "😀", "1:2:3:4:5", "0xG1"]
        let peer = "C0:FF:EE:00:00:01/random"
        let templates: [[String]] = [
            ["scan", "--duration", "@"], ["scan", "--interval", "@"], ["scan", "--window", "@"], ["scan", "--rssi", "@"],
            ["scan", "--uuid", "@"], ["advertise", "--interval", "@"], ["advertise", "--tx-power", "@"],
            ["advertise", "--manufacturer", "@"], ["advertise", "--service", "@"],
            ["gatt", "read", peer, "--handle", "@"], ["gatt", "read", peer, "--uuid", "@"], ["gatt", "read", "@", "--uuid", "2A00"],
            ["gatt", "read", peer, "--uuid", "2A00", "--att-mtu", "@"], ["gatt", "read", peer, "--uuid", "2A00", "--timeout", "@"],
            ["gatt", "read", peer, "--uuid", "2A00", "--connect-timeout", "@"],
            ["gatt", "read", peer, "--uuid", "2A00", "--connection-parameters", "@"],
            ["gatt", "read", peer, "--uuid", "2A00", "--data-length", "@"], ["gatt", "read", peer, "--uuid", "2A00", "--phy", "@"],
            ["gatt", "read", peer, "--uuid", "2A00", "--eatt", "@"], ["gatt", "read", peer, "--uuid", "2A00", "--minimum-key-size", "@"],
            ["gatt", "read", peer, "--uuid", "2A00", "--bond-limit", "@"], ["gatt", "write", peer, "--handle", "3", "--value", "@"],
            ["gatt", "subscribe", peer, "--uuid", "2A00", "--count", "@"],
            ["hci", "@"], ["hci", "reset", "@"], ["hci", "reset", "--events", "@"],
            ["l2cap", "connect", peer, "--spsm", "@"], ["l2cap", "listen", "--spsm", "@"],
            ["info", "--timeout", "@"], ["leinfo", "@"], ["pair", "@"], ["pair", peer, "--passkey", "@"], ["sync", "@"],
            ["radio", "--port", "@"], ["radio", "--controllers", "@"], ["radio", "--tick", "@"], ["radio", "--distance", "@"],
        ]
        // A value this option does take: a write of no bytes is a write.
        let taken: Set<[String]> = [["gatt", "write", peer, "--handle", "3", "--value", ""]]
        // A sign, which UInt16(_:radix:) would take, separators inside a byte
        // (manufacturer data 1:2:3:4:5 once advertised company 0x0001 with 23 45), and
        // hyphens where a UUID has none (1-8-0-F was 180F).
        let signed: [[String]] = [["gatt", "read", peer, "--handle", "+3"], ["gatt", "read", peer, "--handle", "0x+3"],
                                  ["l2cap", "connect", peer, "--spsm", "+128"], ["advertise", "--manufacturer", "+4c:01"],
                                  ["advertise", "--manufacturer", "004c:1:2"], ["advertise", "--manufacturer", "004c:0 1"],
                                  ["gatt", "read", "C0:FF:EE:00:00:+1/random", "--uuid", "2A00"], ["scan", "--uuid", "1-8-0-F"]]
        let cases = templates.flatMap { t in values.map { v in t.map { $0 == "@" ? v : $0 } } }.filter { !taken.contains($0) } + signed
        let refused = try await withThrowingTaskGroup(of: ([String], Int32, String).self) { group in
            var next = cases.makeIterator(), results: [([String], Int32, String)] = []
            func launchNext() {
                guard let args = next.next() else { return }
                group.addTask { let r = try await Self.run(args + ["-t", "virtual"]); return (args, r.status, r.out) }
            }
            for _ in 0..<4 { launchNext() }
            while let r = try await group.next() {
                results.append(r)
                launchNext()
            }
            return results
        }
        #expect(refused.count == cases.count)
        for (args, status, out) in refused {
            #expect(status == 64 && out.contains("Usage: btctl"), "btctl \(args.joined(separator: " ")): status \(status): \(out.prefix(300))")
        }
    }

    @Test func versionAndArgumentErrors() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let version = try await Self.run(["--version"])
        #expect(version.status == 0)
        #expect(version.out.split(separator: ".").count == 3, "\(version.out)")

        let negative = try await Self.run(["scan", "-t", "virtual", "--timeout", "-1"])
        #expect(negative.status == 64)
        #expect(negative.out.contains("--timeout must be between 0.01 and 3600 seconds, not -1.0"), "\(negative.out)")
        #expect(negative.out.contains("Usage: btctl scan"), "the subcommand's usage, not the top level's: \(negative.out)")

        let port = try await Self.run(["info", "-t", "tcp:127.0.0.1:99999"])
        #expect(port.status == 64)
        #expect(port.out.contains("port 99999 is out of range 1...65535"), "\(port.out)")
        #expect(port.out.contains("Usage: btctl info"), "\(port.out)")

        let rssi = try await Self.run(["scan", "-t", "virtual", "--min-rssi", "-200"])
        #expect(rssi.out.contains("--min-rssi must be between -127 and 20 dBm, not -200"), "\(rssi.out)")

        for command in [["l2cap", "connect", "--name", "x", "--spsm", "0x80"], ["l2cap", "listen", "0x80"]] {
            let never = try await Self.run(command + ["-t", "virtual", "--security", "secure-connections", "--legacy"])
            #expect(never.status == 64 && never.out.contains("--security secure-connections cannot be met with --legacy"), "\(never.out)")
        }

        for (command, value, says) in [(["gatt", "read", "--name", "x", "--handle", "3"], "--att-mtu", "22"), (["gatt", "serve", "f.json"], "--att-mtu", "518"),
                                       (["gatt", "discover", "--name", "x"], "--eatt", "6")] {
            let bad = try await Self.run(command + ["-t", "virtual", value, says])
            let expected = value == "--eatt" ? "--eatt must be 1 to 5, not 6" : "--att-mtu must be 23 to 517, not \(says)"
            #expect(bad.status == 64 && bad.out.contains(expected), "\(bad.out)")
        }

        let parse = try await Self.run(["gatt", "read", "--bogus"])
        #expect(parse.status == 64)
        #expect(parse.out.contains("Usage: btctl gatt read"), "\(parse.out)")
    }

    /// A negative RSSI floor parses; the virtual radio's sender is heard at -52 dBm
    /// (3.5 m); JSON carries numbers and booleans as such and ends with a summary.
    @Test func scanOnTheVirtualRadio() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let r = try await Self.run(["scan", "-t", "virtual", "--min-rssi", "-70", "--duration", "1.5", "--json"])
        #expect(r.status == 0, "\(r.out)")
        let objects = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let first = try #require(objects.first { $0["event"] as? String == "advertisement" }, "\(r.out)")
        #expect(first["name"] as? String == "FireAlarm-B3")
        #expect(first["rssi"] as? Int == -52)
        #expect(first["connectable"] as? Bool == true)
        #expect((first["distance_m"] as? Double).map { abs($0 - 3.5) < 0.2 } == true, "\(first)")
        let summary = try #require(objects.last)
        #expect(summary["event"] as? String == "summary")
        #expect((summary["devices"] as? [[String: Any]])?.first?["name"] as? String == "FireAlarm-B3")
    }

    /// `--accept`: the sender is heard while it is on the accept list, and nothing else
    /// is; the scan goes through the controller's Filter Accept List (the trace says so).
    @Test func scanThroughTheAcceptList() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let listed = try await Self.run(["scan", "-t", "virtual", "--accept", "C0:FF:EE:00:00:01", "--duration", "0.5", "--json"])
        #expect(listed.status == 0, "\(listed.out)")
        #expect(listed.out.contains("\"name\":\"FireAlarm-B3\""), "\(listed.out)")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-accept-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let trace = dir.appendingPathComponent("scan.btsnoop").path
        let other = try await Self.run(["scan", "-t", "virtual", "--accept", "C0:FF:EE:00:00:02/random", "--duration", "0.5", "--json", "--btsnoop", trace])
        #expect(other.status == 0 && !other.out.contains("\"advertisement\""), "\(other.out)")
        let shown = try await Self.run(["trace", "show", trace])
        #expect(shown.out.contains("address: C0:FF:EE:00:00:02") && shown.out.contains("scanningFilterPolicy: 1"), "\(shown.out)")
        let bad = try await Self.run(["scan", "-t", "virtual", "--accept", "C0:FF:EE:00:00"])
        #expect(bad.status == 64, "\(bad.out)")
        let badPHY = try await Self.run(["scan", "-t", "virtual5", "--phy", "2m"])
        #expect(badPHY.status == 64 && badPHY.out.contains("--phy"), "\(badPHY.out)")
    }

    /// `--interval` and `--window` go to the controller (the trace says so, in 0.625 ms
    /// units); a window longer than the interval is a usage error.
    @Test func scanTiming() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-timing-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let trace = dir.appendingPathComponent("scan.btsnoop").path
        let r = try await Self.run(["scan", "-t", "virtual", "--interval", "500", "--window", "50", "--duration", "0.5", "--json", "--btsnoop", trace])
        #expect(r.status == 0 && r.out.contains("FireAlarm-B3"), "\(r.out)")
        let shown = try await Self.run(["trace", "show", trace])
        #expect(shown.out.contains("scanInterval: 800") && shown.out.contains("scanWindow: 80"), "\(shown.out)")
        let bad = try await Self.run(["scan", "-t", "virtual", "--interval", "50", "--window", "100"])
        #expect(bad.status == 64 && bad.out.contains("--window"), "\(bad.out)")
    }

    /// `-t virtual5`: the virtual radio with Bluetooth 5 controllers. btctl's host
    /// drives its controller with the extended commands (the trace shows them) and
    /// finds, connects to and reads the sender as on `virtual`.
    @Test func theVirtualRadioWithBluetooth5Controllers() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let info = try await Self.run(["info", "-t", "virtual5", "--json"])
        #expect(info.status == 0, "\(info.out)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(info.out.utf8)) as? [String: Any], "\(info.out)")
        #expect(object["advertising_sets"] as? Int == 4 && object["max_advertising_data_length"] as? Int == 1650, "\(object)")
        // LE Read Supported States: the virtual controller claims all 42 of §7.8.27.
        let states = object["le_states"] as? [String]
        #expect(object["le_states_mask"] as? Int == 0x3FF_FFFF_FFFF && states?.count == 42
                && states?.first == "Non-connectable Advertising" && states?.last == "Initiating + Connection (Peripheral Role)", "\(object)")
        let text = try await Self.run(["info", "-t", "virtual5"])
        #expect(text.out.contains("LE states         42 of 42 defined\n"), "\(text.out)")
        let trace = Self.temporary("virtual5.btsnoop")
        let r = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual5", "--uuid", "2A00", "--btsnoop", trace])
        #expect(r.status == 0 && r.out.contains("FireAlarm-B3"), "\(r.out)")
        let commands = Set(try TraceReader.read(contentsOf: trace).records.compactMap { r -> HCIOpcode? in
            if case let .command(op, _)? = r.packet { return op }
            return nil
        })
        #expect(commands.isSuperset(of: [.leSetExtendedScanEnable, .leExtendedCreateConnection]), "\(commands)")
        #expect(commands.isDisjoint(with: [.leSetScanEnable, .leCreateConnection]), "\(commands)")
        // --phy: the link moves to LE 2M (LE Set PHY, then LE PHY Update Complete says so);
        // a controller driven as Bluetooth 4.2 (virtual) keeps LE 1M and says why.
        let fast = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual5", "--uuid", "2A00", "--phy", "2m", "--json"])
        let lines = try JSONSchemaTests.check(fast.out, against: "gatt-read")
        #expect(fast.status == 0 && lines.first?["event"] as? String == "phy" && lines.first?["tx"] as? String == "LE 2M"
                && lines.first?["rx"] as? String == "LE 2M", "\(fast.out)")
        let slow = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual", "--uuid", "2A00", "--phy", "2m", "--phy", "coded"])
        #expect(slow.status == 0 && slow.out.contains("the PHY stays"), "\(slow.out)")
        let bad = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual5", "--uuid", "2A00", "--phy", "3m"])
        #expect(bad.status == 64 && bad.out.contains("1m, 2m or coded"), "\(bad.out)")
        // --data-length: we send 120-octet PDUs (LE Set Data Length, then LE Data Length
        // Change); the demo's peripheral still sends 27. Outside 27...251: a usage error.
        let long = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual", "--uuid", "2A00", "--data-length", "120", "--json"])
        let longLines = try JSONSchemaTests.check(long.out, against: "gatt-read")
        #expect(long.status == 0 && longLines.first?["event"] as? String == "data_length" && longLines.first?["tx_octets"] as? Int == 120
                && longLines.first?["tx_time"] as? Int == 1072 && longLines.first?["rx_octets"] as? Int == 27, "\(long.out)")
        let tooLong = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual", "--uuid", "2A00", "--data-length", "252"])
        #expect(tooLong.status == 64 && tooLong.out.contains("27 to 251"), "\(tooLong.out)")
        // leinfo: the peer's controller, as LE Read Remote Features and Read Remote
        // Version Information give it (hcitool leinfo); a Bluetooth 5 peer has LE 2M.
        let peerInfo = try await Self.run(["leinfo", "--name", "FireAlarm-B3", "-t", "virtual5", "--json"])
        let infoLines = try JSONSchemaTests.check(peerInfo.out, against: "leinfo")
        #expect(peerInfo.status == 0 && infoLines.first?["event"] as? String == "peer" && infoLines.first?["version"] as? Int == 13
                && (infoLines.first?["le_features"] as? [String])?.contains("LE 2M PHY") == true
                && infoLines.first?["interval"] as? Int == 40 && infoLines.first?["phy_tx"] as? String == "LE 1M", "\(peerInfo.out)")
        // Several --handle: read together (Read Multiple Variable Length), one event each, in order.
        let both = try await Self.run(["gatt", "read", "--name", "FireAlarm-B3", "-t", "virtual", "--handle", "5", "--handle", "3", "--json"])
        let bothLines = try JSONSchemaTests.check(both.out, against: "gatt-read")
        #expect(both.status == 0 && bothLines.map { $0["handle"] as? Int } == [5, 3] && bothLines.last?["text"] as? String == "FireAlarm-B3", "\(both.out)")
        let twoUUIDs = try await Self.run(["gatt", "write", "--name", "FireAlarm-B3", "-t", "virtual", "--handle", "5", "--handle", "3", "--value", "00"])
        #expect(twoUUIDs.status == 64 && twoUUIDs.out.contains("give one --handle"), "\(twoUUIDs.out)")
        // --connection-parameters: the link starts with them (the maximum interval, as
        // the controller takes it); ones LE Create Connection refuses are a usage error.
        let asked = try await Self.run(["leinfo", "--name", "FireAlarm-B3", "-t", "virtual", "--connection-parameters", "16:24:3:400", "--json"])
        let askedLines = try JSONSchemaTests.check(asked.out, against: "leinfo")
        #expect(asked.status == 0 && askedLines.first?["interval"] as? Int == 24 && askedLines.first?["latency"] as? Int == 3
                && askedLines.first?["supervision_timeout"] as? Int == 400, "\(asked.out)")
        let tooShort = try await Self.run(["leinfo", "--name", "FireAlarm-B3", "-t", "virtual", "--connection-parameters", "80:80:1:30"])
        #expect(tooShort.status == 64 && tooShort.out.contains("not longer than"), "\(tooShort.out)")
        let infoText = try await Self.run(["leinfo", "--name", "FireAlarm-B3", "-t", "virtual"])
        #expect(infoText.status == 0 && infoText.out.contains("LL version    5.4 (13)") && !infoText.out.contains("LE 2M PHY"), "\(infoText.out)")
        // Several peers: whichever the controller connects to first (its Filter Accept List), said.
        let any = try await Self.run(["gatt", "read", "C0:FF:EE:00:00:09", "C0:FF:EE:00:00:01", "-t", "virtual5", "--uuid", "2A00", "--json"])
        let anyLines = try JSONSchemaTests.check(any.out, against: "gatt-read")
        #expect(any.status == 0 && anyLines.first?["event"] as? String == "connected" && anyLines.first?["peer"] as? String == "C0:FF:EE:00:00:01",
                "\(any.out)")
        let none = try await Self.run(["gatt", "read", "C0:FF:EE:00:00:09", "C0:FF:EE:00:00:08/random", "-t", "virtual", "--uuid", "2A00",
                                       "--connect-timeout", "0.5"])
        #expect(none.status == 1 && none.out.contains("no connection to any of C0:FF:EE:00:00:09, C0:FF:EE:00:00:08/random"), "\(none.out)")
    }

    /// `btctl advertise --set` on Rootcanal: the main advertisement and two sets, one
    /// connectable with a name, one a manufacturer beacon, are heard by another btctl's
    /// scan side by side; bad specs are refused with the command's usage; a controller
    /// driven with the legacy commands (the virtual radio) says the sets need extended advertising.
    @Test func advertiseSetsSideBySide() async throws {
        guard BtctlGATTTests.isBuilt(), let binary = try Interop.rootcanal() else { return }
        for (spec, says) in [("name=x,bogus", "'bogus' is not one of"), ("connectable", "advertises nothing"), ("name=x,interval=5", "interval must be between 20 and 10240 ms")] {
            let bad = try await Self.run(["advertise", "-t", "virtual", "--set", spec])
            #expect(bad.status == 64 && bad.out.contains(says) && bad.out.contains("Usage: btctl advertise"), "\(bad.out)")
        }
        let legacy = try await Self.run(["advertise", "-t", "virtual", "--name", "main", "--set", "name=beacon", "--duration", "0.5"])
        #expect(legacy.status != 0 && legacy.out.contains("extended advertising"), "\(legacy.out)")

        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let adv = try LiveProcess(BtctlGATTTests.btctl, ["advertise", "--name", "btctl-main", "--non-connectable", "--set", "name=btctl-second,connectable,interval=50",
                                                         "--set", "manufacturer=05f1:0102,interval=200", "-t", rc.transportSpec, "--json", "--duration", "30"])
        #expect(await adv.waitForOutput { $0.components(separatedBy: "\"advertising\"").count == 4 }, "\(adv.output)")
        let scan = try await JSONSchemaTests.run(["scan", "-t", rc.transportSpec, "--json", "--duration", "1.5"])
        // A central connects to the connectable set: advertise says which set it was.
        let discover = try await Self.run(["gatt", "discover", "-t", rc.transportSpec, "--name", "btctl-second", "--connect-timeout", "10"])
        #expect(discover.status == 0, "\(discover.out)")
        #expect(await adv.waitForOutput { $0.contains("\"connected\"") }, "\(adv.output)")
        #expect(await adv.stop(signal: SIGINT) == 130)
        let all = try JSONSchemaTests.check(adv.output, against: "advertise")
        let lines = all.filter { $0["event"] as? String == "advertising" }
        #expect(lines.map { $0["set"] as? Int } == [0, 1, 2] && lines.map { $0["connectable"] as? Bool } == [false, true, false], "\(adv.output)")
        #expect(all.filter { $0["event"] as? String == "connected" }.map { $0["set"] as? Int } == [1], "\(adv.output)")
        let heard = try JSONSchemaTests.check(scan.out, against: "scan").filter { $0["event"] as? String == "advertisement" }
        #expect(Set(heard.compactMap { $0["name"] as? String }).isSuperset(of: ["btctl-main", "btctl-second"]), "\(scan.out)")
        // --accept: a central not on the list cannot connect (Rootcanal checks the filter policy).
        let only = try LiveProcess(BtctlGATTTests.btctl, ["advertise", "--name", "btctl-only", "--accept", "C0:FF:EE:00:0A:01/random",
                                                          "-t", rc.transportSpec, "--json", "--duration", "30"])
        #expect(await only.waitForOutput { $0.contains("\"advertising\"") }, "\(only.output)")
        let refused = try await Self.run(["gatt", "discover", "-t", rc.transportSpec, "--name", "btctl-only", "--connect-timeout", "2"])
        #expect(refused.status == 1 && refused.out.contains("no connection"), "\(refused.out)")
        #expect(await only.stop(signal: SIGINT) == 130)
        let onlyLines = try JSONSchemaTests.check(only.output, against: "advertise").filter { $0["event"] as? String == "advertising" }
        #expect(onlyLines.first?["accept_list"] as? [String] == ["C0:FF:EE:00:0A:01/random"], "\(only.output)")
        let beacon = heard.first { ($0["manufacturer_data"] as? [[String: Any]])?.contains { $0["company"] as? Int == 0x05F1 && $0["data"] as? String == "0102" } == true }
        #expect(beacon?["connectable"] as? Bool == false, "\(scan.out)")
        // --phy coded: long range, heard by a scan on LE Coded alone (Rootcanal checks the PHY).
        let far = try LiveProcess(BtctlGATTTests.btctl, ["advertise", "--name", "btctl-far", "--phy", "coded", "-t", rc.transportSpec, "--json", "--duration", "30"])
        #expect(await far.waitForOutput { $0.contains("\"advertising\"") }, "\(far.output)")
        let onCoded = try await JSONSchemaTests.run(["scan", "-t", rc.transportSpec, "--json", "--duration", "1", "--phy", "coded"])
        let coded = try JSONSchemaTests.check(onCoded.out, against: "scan").filter { $0["name"] as? String == "btctl-far" }
        #expect(!coded.isEmpty && coded.allSatisfy { $0["primary_phy"] as? String == "LE Coded" }, "\(onCoded.out)")
        let on1M = try await Self.run(["scan", "-t", rc.transportSpec, "--json", "--duration", "1"])
        #expect(on1M.status == 0 && !on1M.out.contains("btctl-far"), "\(on1M.out)")
        // A central finds and reaches it with --connect-phy coded, and not without.
        let unreached = try await Self.run(["gatt", "discover", "-t", rc.transportSpec, "--name", "btctl-far", "--connect-timeout", "2"])
        #expect(unreached.status == 1 && unreached.out.contains("no device named"), "\(unreached.out)")
        let reached = try await Self.run(["gatt", "discover", "-t", rc.transportSpec, "--name", "btctl-far", "--connect-phy", "coded", "--connect-timeout", "10"])
        #expect(reached.status == 0, "\(reached.out)")
        #expect(await far.waitForOutput { $0.contains("\"connected\"") }, "\(far.output)")
        #expect(await far.stop(signal: SIGINT) == 130)
        let farLines = try JSONSchemaTests.check(far.output, against: "advertise").filter { $0["event"] as? String == "advertising" }
        #expect(farLines.first?["primary_phy"] as? String == "LE Coded", "\(far.output)")
    }

    /// `btctl advertise --set ...,events=N` and `--set ...,duration=MS` on the virtual
    /// radio's Bluetooth 5 controllers (which tick every 50 ms: one advertising event
    /// each): both sets end by themselves, each reported by an `advertising_ended` line,
    /// while the main advertisement goes on; limits out of range are refused.
    @Test func advertiseSetsWithLimitsEnd() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        for (spec, says) in [("name=x,duration=5", "duration must be between 10 and 655350 ms"), ("name=x,events=0", "events must be between 1 and 255")] {
            let bad = try await Self.run(["advertise", "-t", "virtual5", "--set", spec])
            #expect(bad.status == 64 && bad.out.contains(says), "\(bad.out)")
        }
        let adv = try await Self.run(["advertise", "-t", "virtual5", "--json", "--duration", "2", "--name", "main",
                                      "--set", "name=burst,events=3", "--set", "name=short,duration=300"])
        #expect(adv.status == 0, "\(adv.out)")
        let lines = try JSONSchemaTests.check(adv.out, against: "advertise")
        let ended = lines.filter { $0["event"] as? String == "advertising_ended" }
        #expect(ended.count == 2, "\(adv.out)")
        let bySet = Dictionary(ended.compactMap { l in (l["set"] as? Int).map { ($0, l) } }, uniquingKeysWith: { a, _ in a })
        #expect(bySet[1]?["reason"] as? String == "event_limit" && bySet[1]?["events"] as? Int == 3, "\(adv.out)")
        #expect(bySet[2]?["reason"] as? String == "duration", "\(adv.out)")
        #expect(lines.last?["event"] as? String == "stopped", "\(adv.out)")
    }

    /// `--directed`: the advertisement is for one device; `--high-duty` ends by itself
    /// after 1.28 s (nobody at that address connects), reported as its duration's end.
    /// Data with ADV_DIRECT_IND (the legacy commands) is refused, as are --high-duty
    /// without --directed and with data.
    @Test func advertiseDirected() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let adv = try await Self.run(["advertise", "-t", "virtual", "--json", "--duration", "3", "--directed", "C0:FF:EE:00:00:02/random", "--high-duty"])
        #expect(adv.status == 0, "\(adv.out)")
        let lines = try JSONSchemaTests.check(adv.out, against: "advertise")
        let first = lines.first { $0["event"] as? String == "advertising" }
        #expect(first?["directed"] as? String == "C0:FF:EE:00:00:02/random" && first?["high_duty"] as? Bool == true && first?["data"] as? String == "", "\(adv.out)")
        #expect(lines.contains { $0["event"] as? String == "advertising_ended" && $0["reason"] as? String == "duration" }, "\(adv.out)")
        let named = try await Self.run(["advertise", "-t", "virtual", "--duration", "0.5", "--directed", "C0:FF:EE:00:00:02", "--name", "x"])
        #expect(named.status == 1 && named.out.contains("ADV_DIRECT_IND carries none"), "\(named.out)")
        let extended = try await Self.run(["advertise", "-t", "virtual5", "--duration", "0.5", "--directed", "C0:FF:EE:00:00:02", "--name", "x"])
        #expect(extended.status == 0 && extended.out.contains("directed to C0:FF:EE:00:00:02"), "\(extended.out)")
        // A set of its own, directed, beside an undirected advertisement.
        let set = try await Self.run(["advertise", "-t", "virtual5", "--json", "--duration", "0.5", "--name", "main", "--set", "name=door,directed=C0:FF:EE:00:00:02"])
        let sets = try JSONSchemaTests.check(set.out, against: "advertise").filter { $0["event"] as? String == "advertising" }
        #expect(sets.map { $0["directed"] as? String } == [nil, "C0:FF:EE:00:00:02"] && sets.last?["connectable"] as? Bool == true, "\(set.out)")
        for (args, says) in [(["--high-duty"], "--high-duty is for directed advertising"), (["--directed", "C0:FF:EE:00:00:02", "--high-duty", "--name", "x"], "carries no data"),
                             (["--directed", "C0:FF:EE:00:00:02", "--non-connectable"], "is connectable")] {
            let bad = try await Self.run(["advertise", "-t", "virtual"] + args)
            #expect(bad.status == 64 && bad.out.contains(says), "\(bad.out)")
        }
    }

    /// `btctl sync` on `virtual5`: the fire-alarm sender's periodic train, found by
    /// address or name, followed for the duration; the scan shows the pointer to it.
    /// On `virtual` (legacy controllers) there is none to find.
    @Test func syncFollowsAPeriodicTrain() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let r = try await Self.run(["sync", "-t", "virtual5", "C0:FF:EE:00:00:01", "--json", "--duration", "0.5"])
        #expect(r.status == 0, "\(r.out)")
        let lines = try JSONSchemaTests.check(r.out, against: "sync")
        #expect(lines.first?["event"] as? String == "synchronized" && lines.first?["interval_ms"] as? Double == 100, "\(r.out)")
        let packets = lines.filter { $0["event"] as? String == "periodic_advertisement" }
        #expect(!packets.isEmpty && packets.allSatisfy { $0["data"] as? String == "08ffffff4641206f6b" }, "\(r.out)")
        #expect(lines.last?["event"] as? String == "sync_ended" && lines.last?["reason"] as? String == "stopped", "\(r.out)")
        let byName = try await Self.run(["sync", "-t", "virtual5", "--name", "FireAlarm-B3 status", "--duration", "0.3"])
        #expect(byName.status == 0 && byName.out.contains("4641206f6b"), "\(byName.out)")
        // The sender's set is on LE 1M: looked for on LE Coded alone it is not found; on both, it is.
        let onCoded = try await Self.run(["sync", "-t", "virtual5", "--name", "FireAlarm-B3 status", "--phy", "coded", "--within", "0.5"])
        #expect(onCoded.status == 1 && onCoded.out.contains("no periodic advertising"), "\(onCoded.out)")
        let onBoth = try await Self.run(["sync", "-t", "virtual5", "--name", "FireAlarm-B3 status", "--phy", "1m", "--phy", "coded", "--duration", "0.3"])
        #expect(onBoth.status == 0 && onBoth.out.contains("4641206f6b"), "\(onBoth.out)")
        let scan = try await Self.run(["scan", "-t", "virtual5", "--json", "--duration", "0.5"])
        let heard = try JSONSchemaTests.check(scan.out, against: "scan")
        #expect(heard.contains { $0["name"] as? String == "FireAlarm-B3 status" && $0["periodic_interval_ms"] as? Double == 100 && $0["sid"] as? Int == 1 }, "\(scan.out)")
        let legacy = try await Self.run(["sync", "-t", "virtual", "C0:FF:EE:00:00:01", "--within", "0.5"])
        #expect(legacy.status == 1 && legacy.out.contains("this controller has no periodic advertising"), "\(legacy.out)")
        let none = try await Self.run(["sync", "-t", "virtual5", "C0:FF:EE:00:00:09", "--within", "0.5"])
        #expect(none.status == 1 && none.out.contains("no periodic advertising from C0:FF:EE:00:00:09"), "\(none.out)")
        let bad = try await Self.run(["sync", "-t", "virtual5", "C0:FF:EE:00:00:01", "--sid", "16"])
        #expect(bad.status == 64 && bad.out.contains("--sid must be between 0 and 15"), "\(bad.out)")
        // Several advertisers, each with its set: whichever the controller finds (its Periodic Advertiser List).
        let any = try await Self.run(["sync", "-t", "virtual5", "C0:FF:EE:00:00:09/2", "C0:FF:EE:00:00:01/public/1", "--json", "--duration", "0.3"])
        let anyLines = try JSONSchemaTests.check(any.out, against: "sync")
        #expect(any.status == 0 && anyLines.first?["address"] as? String == "C0:FF:EE:00:00:01" && anyLines.first?["sid"] as? Int == 1, "\(any.out)")
        let nobody = try await Self.run(["sync", "-t", "virtual5", "C0:FF:EE:00:00:09/1", "C0:FF:EE:00:00:08/random/2", "--within", "0.5"])
        #expect(nobody.status == 1 && nobody.out.contains("no periodic advertising from C0:FF:EE:00:00:09 (SID 1), C0:FF:EE:00:00:08 (SID 2)"),
                "\(nobody.out)")
        for (args, says) in [(["C0:FF:EE:00:00:01/16"], "bad advertiser"), (["C0:FF:EE:00:00:01/public/random"], "bad advertiser"),
                             (["C0:FF:EE:00:00:01/1", "--sid", "1"], "not both")] {
            let refused = try await Self.run(["sync", "-t", "virtual5"] + args)
            #expect(refused.status == 64 && refused.out.contains(says), "\(refused.out)")
        }
        // The advertiser's side: a set with a train.
        let adv = try await Self.run(["advertise", "-t", "virtual5", "--json", "--duration", "0.3", "--name", "main",
                                      "--set", "name=beacon,periodic=ffff:0102,periodic-interval=50"])
        #expect(adv.status == 0, "\(adv.out)")
        let advertised = try JSONSchemaTests.check(adv.out, against: "advertise")
        #expect(advertised.contains { $0["set"] as? Int == 1 && $0["periodic"] as? String == "05ffffff0102" && $0["periodic_interval_ms"] as? Double == 50 },
                "\(adv.out)")
        let connectable = try await Self.run(["advertise", "-t", "virtual5", "--set", "name=b,connectable,periodic=ffff:01"])
        #expect(connectable.status == 64 && connectable.out.contains("needs a set that is not connectable"), "\(connectable.out)")
    }

    /// Ctrl-C during a scan: scanning stops before the exit, the trace is complete, 130.
    @Test func sigintEndsAScanCleanly() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let trace = Self.temporary("scan-int.btsnoop")
        let r = try await Self.run(["scan", "-t", "virtual", "--duration", "60", "--btsnoop", trace], interrupt: (SIGINT, "FireAlarm-B3"))
        #expect(r.status == 130, "\(r.out)")
        #expect(r.out.contains("1 device"), "the summary table is printed: \(r.out)")
        let t = try TraceReader.read(contentsOf: trace)
        #expect(t.damage == nil)
        let commands = t.records.compactMap { r -> HCIOpcode? in
            if case let .command(op, _)? = r.packet { return op }
            return nil
        }
        #expect([HCIOpcode.leSetScanEnable, .leSetExtendedScanEnable].contains(commands.last), "the scan is stopped: \(commands)")
    }

    /// SIGTERM while subscribed: the link ends with Disconnect (Remote User Terminated
    /// Connection) and its Disconnection Complete, then 143.
    @Test func sigtermDisconnectsBeforeExiting() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let trace = Self.temporary("subscribe-term.btsnoop")
        let r = try await Self.run(["gatt", "subscribe", "--name", "FireAlarm-B3", "-t", "virtual", "--indicate",
                                    "--uuid", "F1DE0001-2C4B-4D5E-8F60-7A8B9CADBEEF", "--btsnoop", trace],
                                   interrupt: (SIGTERM, "subscribed to"))
        #expect(r.status == 143, "\(r.out)")
        let packets = try TraceReader.read(contentsOf: trace).records.compactMap(\.packet)
        let disconnect = packets.lastIndex { if case .command(.disconnect, let p) = $0 { return p.last == 0x13 } else { return false } }
        let complete = packets.lastIndex { if case .event(.disconnectionComplete, _) = $0 { return true } else { return false } }
        #expect(disconnect != nil && complete != nil && disconnect! < complete!, "Disconnect (0x13) then Disconnection Complete")
    }

    /// Every conversion of a recorded Rootcanal session reads back with the same
    /// packets, and tshark reads each output with no malformed frame.
    @Test(arguments: ["pcap", "pcapng", "btsnoop"])
    func traceConvert(to format: String) async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let source = Interop.root + "/Fixtures/rootcanal-gatt-read.btsnoop"
        let out = Self.temporary("converted." + format)
        let r = try await Self.run(["trace", "convert", source, out])
        #expect(r.status == 0, "\(r.out)")
        let original = try TraceReader.read(contentsOf: source)
        let converted = try TraceReader.read(contentsOf: out)
        #expect(converted.records.map(\.packet) == original.records.map(\.packet))
        #expect(converted.records.map(\.direction) == original.records.map(\.direction))
        #expect(converted.records.map(\.timestampMicros) == original.records.map(\.timestampMicros))

        // `-`: the same bytes on stdout (the report goes to stderr).
        let piped = Self.temporary("piped." + format)
        let shell = try await Interop.execute("/bin/sh", ["-c", "\"$0\" trace convert \"$1\" - --to \(format) > \"$2\"", BtctlGATTTests.btctl, source, piped])
        #expect(shell.status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: piped)) == Data(contentsOf: URL(fileURLWithPath: out)))
        guard let tshark = try Interop.tshark() else { return }
        let frames = try await Interop.run(tshark, ["-r", out])
        #expect(frames.split(separator: "\n").count == original.records.count, "\(frames)")
        let malformed = try await Interop.run(tshark, ["-r", out, "-Y", "_ws.malformed || _ws.expert.severity == error"])
        #expect(malformed.isEmpty, "\(malformed)")
    }

    /// `gatt serve` refuses what Decodable would let through, naming the JSON path.
    @Test func gattServeRejectsWhatItWouldIgnore() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let cases: [(String, String)] = [
            (#"{"name":"x","servces":[]}"#, "unknown key 'servces'"),
            (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","properties":["read"],"value":"01","text":"a"}]}]}"#,
             "services[0].characteristics[0]: give 'value' (hex) or 'text', not both"),
            (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","properties":["notify"],"descriptors":[{"uuid":"2902"}]}]}]}"#,
             "services[0].characteristics[0].descriptors[0]: 2902 (Client Characteristic Configuration) is added by the server"),
            (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","properties":["read"],"descriptors":[{"uuid":"2901"},{"uuid":"2901"}]}]}]}"#,
             "services[0].characteristics[0].descriptors[1]: descriptor 2901 is listed twice"),
            (#"{"services":[{"uuid":"180F","includes":["FFE8"]},{"uuid":"FFE8","primary":false}]}"#,
             "services[0].includes: no service FFE8 is listed before this one"),
            (#"{"services":[{"uuid":"FFE8","primary":false},{"uuid":"180F","includes":["FFE8","FFE8"]}]}"#,
             "services[1].includes: FFE8 is included twice"),
            (#"{"services":[{"uuid":"180F","includes":["nope"]}]}"#, "services[0].includes: 'nope' is not a UUID"),
        ]
        for (i, (json, message)) in cases.enumerated() {
            let path = Self.temporary("db-\(i).json")
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            let r = try await Self.run(["gatt", "serve", path, "-t", "virtual", "--duration", "1"])
            #expect(r.status == 1 && r.out.contains(message), "\(r.out)")
        }
    }

    /// `btctl hci`: one command as given, every packet decoded as `trace show` decodes
    /// it; the answer's status decides the exit status; `--events` shows what follows.
    @Test func hciSendsOneCommandAndShowsTheAnswer() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let buffer = try await Self.run(["hci", "-t", "virtual", "LE Read Buffer Size"])
        #expect(buffer.status == 0 && buffer.out.contains("Command Complete: LE Read Buffer Size status=Success (0x00)"), "\(buffer.out)")
        #expect(buffer.out.contains("leACLDataPacketLength: 251"), "\(buffer.out)")
        // --reset first; OGF:OCF; one JSON object per frame.
        let json = try await Self.run(["hci", "-t", "virtual", "--json", "--reset", "0x08:0x0018"])
        let frames = json.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(json.status == 0 && frames.map { $0["name"] as? String } == ["Reset", "Command Complete", "LE Rand", "Command Complete"], "\(json.out)")
        #expect(frames.last?["command"] as? String == "LE Rand" && frames.last?["status"] as? Int == 0, "\(json.out)")
        // A status other than Success: exit status 1, the status named.
        let vendor = try await Self.run(["hci", "-t", "virtual", "0x3f:0x001", "01"])
        #expect(vendor.status == 1 && vendor.out.contains("unknown 0xfc01: Unknown HCI Command (0x01)"), "\(vendor.out)")
        // LE Create Connection to the radio's sender: Command Status, then (--events) the link.
        let connect = try await Self.run(["hci", "-t", "virtual", "--events", "1", "LE Create Connection",
                                          "1000", "1000", "00", "00", "010000eeffc0", "00", "1800", "2800", "0000", "f401", "0000", "0000"])
        #expect(connect.status == 0 && connect.out.contains("Command Status: LE Create Connection status=Success (0x00)"), "\(connect.out)")
        #expect(connect.out.contains("LE Meta: LE Connection Complete") && connect.out.contains("peerAddress: C0:FF:EE:00:00:01"), "\(connect.out)")
        for (args, says) in [(["LE Frobnicate"], "COMMAND takes an opcode"), (["reset", "0"], "two digits each"),
                             // Fullwidth digits pass Character.isHexDigit; they once trapped the parse.
                             (["reset", "０１"], "two digits each"), (["reset", "01:00"], "two digits each"),
                             (["lerand", String(repeating: "00", count: 256)], "at most 255 parameter bytes"),
                             (["0x40:0x0001"], "COMMAND takes"), (["lerand", "--events", "0"], "--events must be between 0.1 and 86400")] {
            let bad = try await Self.run(["hci", "-t", "virtual"] + args)
            #expect(bad.status == 64 && bad.out.contains(says) && bad.out.contains("Usage: btctl hci"), "\(bad.out)")
        }
    }

    /// LE Encrypt of FIPS-197's example (Appendix C.1: key 000102…0F, plaintext
    /// 00112233…FF, ciphertext 69C4E0D8…C55A), its octets in HCI's order (least
    /// significant first): Rootcanal's controller and the virtual radio's give the
    /// example's ciphertext. Rootcanal's Read BD_ADDR after --reset is its address.
    @Test func hciOnRootcanalAndTheVirtualRadioAgree() async throws {
        guard BtctlGATTTests.isBuilt(), let binary = try Interop.rootcanal() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let key = "0f0e0d0c0b0a09080706050403020100", plaintext = "ffeeddccbbaa99887766554433221100"
        for transport in [rc.transportSpec, "virtual"] {
            let r = try await Self.run(["hci", "-t", transport, "LE Encrypt", key, plaintext])
            #expect(r.status == 0 && r.out.contains("encryptedData: 5ac5b47080b7cdd830047b6ad8e0c469"), "\(transport): \(r.out)")
        }
        let address = try await Self.run(["hci", "-t", rc.transportSpec, "--reset", "Read BD_ADDR"])
        #expect(address.status == 0 && address.out.contains("Command Complete: Reset status=Success"), "\(address.out)")
        let read = address.out.split(separator: "\n").first { $0.contains("address: ") }.flatMap { BluetoothAddress(String($0.split(separator: " ").last ?? "")) }
        #expect(read != nil && read != .zero, "\(address.out)")
    }
}
