// What a controller answered a command: success, or the status it refused it with.
// For tests that script commands and compare answers (a virtual controller against
// Rootcanal's, a host's mistakes against the spec's statuses).

import HCI

extension HCIController {
    /// Sends `command` and returns `.success` or the status the controller refused it
    /// with; other failures (a timeout, a closed transport) are thrown.
    public func status<C: HCICommand>(of command: C) async throws -> HCIStatus {
        do {
            _ = try await send(command)
            return .success
        } catch let HCIError.commandFailed(_, status) {
            return status
        }
    }
}
