// What a client does when a server refuses a request for the link's security (Vol 3,
// Part F, §3.4.1.1 error codes; Part C, §10.3.2): raise the link's security one step
// and try again, as BlueZ does (an unencrypted link is encrypted first, from a bond
// or by pairing; a link that is encrypted and still refused for authentication is
// paired for an authenticated key). Shared by the facade and btctl.

import ATT
import L2CAP

extension ATTErrorCode {
    /// Insufficient Authentication, Insufficient Encryption and Encryption Key Size
    /// Too Short: refusals that more security may answer.
    public var asksForSecurity: Bool {
        [.insufficientAuthentication, .insufficientEncryption, .encryptionKeySizeTooShort].contains(self)
    }

    /// The next level that may answer this refusal on a link that now has `current`:
    /// encryption while the link is not encrypted (servers answer Insufficient
    /// Authentication for a link that is merely unencrypted, Bumble's and BlueZ's
    /// included), an authenticated key when an encrypted link is refused for
    /// authentication. Nil when the code is not about security or a new pairing would
    /// not change the answer (refused for encryption or key size while encrypted: the
    /// same two configurations negotiate the same key size).
    public func securityLevelNeeded(current: LinkSecurityState) -> SecurityLevel? {
        guard asksForSecurity else { return nil }
        guard current.encrypted else { return .encrypted }
        return self == .insufficientAuthentication && !current.authenticated ? .authenticated : nil
    }
}

/// Runs GATT operations with security on demand.
public enum SecurityOnDemand {
    /// Runs `body`; each time the server refuses it for the link's security, `secure`
    /// is asked for the level the refusal calls for (`securityLevelNeeded`) and `body`
    /// runs again: at most two steps (encrypted, then authenticated), so it ends. What
    /// `secure` throws (a failed pairing) is the answer.
    public static func run<T>(current: () async -> LinkSecurityState, secure: (SecurityLevel) async throws -> Void,
                              _ body: () async throws -> T) async throws -> T {
        var steps = 0
        while true {
            do { return try await body() } catch {
                guard steps < 2, case let GATTClientError.att(.errorResponse(_, _, code)) = error,
                      let level = code.securityLevelNeeded(current: await current()) else { throw error }
                steps += 1
                try await secure(level)
            }
        }
    }
}
