// battery-daemon peripheral|monitor [TRANSPORT] [--record FILE]
//
//   peripheral  serves the Battery Service, notifies 3 levels to the first subscriber
//   monitor     finds it, reads the level, takes 3 updates, disconnects, prints them
//   virtual     both, on the in-process virtual radio (no controller needed)
//
// TRANSPORT as btctl takes it (hci0, tcp:127.0.0.1:6402 for Rootcanal, ...); --record
// writes the host's HCI conversation (btsnoop, or pcap/pcapng by the extension).

import BLE
import BatteryKit
import Foundation
import Logging
import VirtualHCI

var args = Array(CommandLine.arguments.dropFirst())
var record: String?
if let i = args.firstIndex(of: "--record"), i + 1 < args.count {
    record = args[i + 1]
    args.removeSubrange(i...i + 1)
}
guard let role = args.first, ["peripheral", "monitor", "virtual"].contains(role) else {
    FileHandle.standardError.write(Data("usage: battery-daemon peripheral|monitor|virtual [TRANSPORT] [--record FILE]\n".utf8))
    exit(64)
}
// A library takes a Logger and never prints: the daemon decides where logs go.
var logger = Logger(label: "battery-daemon") { StreamLogHandler.standardError(label: $0) }
logger.logLevel = ProcessInfo.processInfo.environment["BATTERY_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .warning

func open(_ spec: String, recordingTo record: String?, logger: Logger) throws -> BluetoothHost {
    if let record { return try BluetoothHost.open(spec, recordingTo: record, logger: logger) }
    return try BluetoothHost.open(spec, logger: logger)
}

do {
    switch role {
    case "virtual":
        let radio = VirtualRadio()
        let p = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:BA:77:00:00:01")!), logger: logger,
                              deviceName: "battery-daemon")
        let c = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:BA:77:00:00:02")!), logger: logger)
        try await p.start()
        try await c.start()
        async let served: Void = BatteryPeripheral(host: p).serve(initial: 100, levels: [99, 98, 97])
        let reading = try await BatteryMonitor(host: c).read(updates: 3)
        try await served
        print("\(reading.name ?? "?"): \(reading.initial)% then \(reading.updates.map { "\($0)%" }.joined(separator: ", "))")
        await c.close()
        await p.close()
    case "peripheral":
        let host = try open(args.dropFirst().first ?? "hci0", recordingTo: record, logger: logger)
        try await host.start()
        try await BatteryPeripheral(host: host).serve(initial: 100, levels: [99, 98, 97])
        await host.close()
    default:
        let host = try open(args.dropFirst().first ?? "hci0", recordingTo: record, logger: logger)
        try await host.start()
        let reading = try await BatteryMonitor(host: host).read(updates: 3)
        print("\(reading.name ?? "?"): \(reading.initial)% then \(reading.updates.map { "\($0)%" }.joined(separator: ", "))")
        await host.close()  // the recording is complete once the host is closed
    }
} catch {
    FileHandle.standardError.write(Data("battery-daemon: \(error)\n".utf8))
    exit(1)
}
