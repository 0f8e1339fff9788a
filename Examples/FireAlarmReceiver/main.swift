// FireAlarmReceiver: the central of the fire-alarm example. Scans, connects to the
// nearest sender, subscribes to its alarm state; on an alarm reads the text,
// estimates the distance, downloads the floor plan and acknowledges; reconnects
// when the link drops. Uses only the BLE facade. `--transport virtual` runs the
// whole session (with a sender) on the in-process radio.

import ArgumentParser
import BLE
import FireAlarm
import Foundation
import Logging

@main
struct FireAlarmReceiverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "FireAlarmReceiver", abstract: "The fire-alarm receiver (central).")

    @Option(name: [.customShort("t"), .long], help: ArgumentHelp("Controller: \(BluetoothHost.transportHelp), or virtual. Default: $BTCTL_TRANSPORT, else hci0.", valueName: "SPEC"))
    var transport: String?
    @Flag(help: "One JSON object per event on stdout.") var json = false
    @Flag(name: .shortAndLong, help: "Log protocol traffic to stderr.") var verbose = false
    @Option(help: ArgumentHelp("HCI command timeout in seconds (0.01 to 3600), as btctl's --timeout.", valueName: "SECONDS")) var timeout: Double = 5
    @Option(help: "The name written when acknowledging.") var name = "receiver"
    @Flag(help: "Exit after handling one alarm.") var once = false
    @Option(help: ArgumentHelp("Seconds to listen for senders before picking the nearest.", valueName: "SECONDS")) var scanTime: Double = 2
    @Option(help: ArgumentHelp("Save downloaded floor plans in this directory.", valueName: "DIR")) var save: String?

    func validate() throws {
        guard timeout.isFinite, (0.01...3600).contains(timeout) else { throw ValidationError("--timeout must be between 0.01 and 3600 seconds, not \(timeout)") }
        guard scanTime > 0, scanTime.isFinite else { throw ValidationError("--scan-time must be a positive number of seconds") }
        if let d = save {
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: d, isDirectory: &isDir), isDir.boolValue else { throw ValidationError("--save: \(d) is not a directory") }
        }
    }

    func run() async throws {
        let log = FireAlarmEvent.printer(json: json)
        var logger = Logger(label: "FireAlarmReceiver") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .trace : .warning
        let spec = transport ?? ProcessInfo.processInfo.environment["BTCTL_TRANSPORT"] ?? "hci0"
        if spec == "virtual" {
            _ = try await FireAlarmDemo.run(saveDirectory: save, logger: logger, log: log)
            return
        }
        let host = try BluetoothHost.open(spec, logger: logger, commandTimeout: .milliseconds(Int((timeout * 1000).rounded())))
        try await host.start()
        let receiver = FireAlarmReceiver(host: host, name: name, scanTime: .milliseconds(Int(scanTime * 1000)), saveDirectory: save, log: log)
        try await receiver.run(once: once)
        await host.close()
    }
}
